// Checks of docker/Dockerfile and docker/compose.yaml: they parse (the
// Dockerfile with dockerfile-ast, compose against the compose-spec JSON
// schema), their stages and paths exist, the runtime stage installs the
// package with scripts/install-deb.sh (the script scripts/package-test.sh
// runs in its chroot), and every flag and port is one the binaries accept.
'use strict';
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const {DockerfileParser} = require('dockerfile-ast');
const Ajv = require('ajv').default;
const {checkArgs} = require('./help');
const {serverPorts} = require('./server_ports');

const INSTALL_SCRIPT = 'scripts/install-deb.sh';

function jsonArgs(text) {
  try {
    const v = JSON.parse(text);
    return Array.isArray(v) && v.every((s) => typeof s === 'string') ? v : null;
  } catch (e) {
    return null;
  }
}

// Returns {errors, image: {entrypoint, cmd, expose, user, volumes, files}}
// where files maps an absolute image path to the repository file COPY'd there.
function checkDockerfile(ctx) {
  const errors = [];
  const rel = 'docker/Dockerfile';
  const file = path.join(ctx.root, rel);
  if (!fs.existsSync(file)) return {errors: [`${rel}: missing`], image: null};
  const df = DockerfileParser.parse(fs.readFileSync(file, 'utf8'));
  const image = {entrypoint: null, cmd: null, healthcheck: null, expose: [], user: null, volumes: [], files: new Map()};
  const stages = [];
  let runsInstallScript = false;
  let installScriptImagePath = null;
  let stage = null;
  for (const ins of df.getInstructions()) {
    const kw = ins.getKeyword();
    const args = ins.getArguments().map((a) => a.getValue());
    const line = ins.getRange().start.line + 1;
    const where = `${rel}:${line}`;
    if (kw === 'FROM') {
      const as = args.findIndex((a) => a.toUpperCase() === 'AS');
      stage = {name: as > 0 ? args[as + 1] : String(stages.length), base: args[0]};
      stages.push(stage);
      if (!/^debian:12(-slim)?$/.test(args[0]) && !stages.some((s) => s.name === args[0])) {
        errors.push(`${where}: stage '${stage.name}' is based on ${args[0]}, not Debian 12`);
      }
      continue;
    }
    if (!stage) {
      if (kw !== 'ARG') errors.push(`${where}: ${kw} before the first FROM`);
      continue;
    }
    const last = stage === stages[stages.length - 1];
    if (kw === 'COPY' || kw === 'ADD') {
      const fromFlag = ins.getFlags ? ins.getFlags().find((f) => f.getName() === 'from') : null;
      const plain = args.filter((a) => !a.startsWith('--'));
      const dest = plain[plain.length - 1];
      const sources = plain.slice(0, -1);
      if (fromFlag) {
        const from = fromFlag.getValue();
        if (!stages.slice(0, -1).some((s) => s.name === from)) {
          errors.push(`${where}: COPY --from=${from} names no earlier stage (stages: ${stages.slice(0, -1).map((s) => s.name).join(', ')})`);
        }
      } else {
        for (const src of sources) {
          if (src === '.') continue;
          if (!fs.existsSync(path.join(ctx.root, src))) {
            errors.push(`${where}: COPY source ${src} does not exist in the repository`);
          }
          if (last && sources.length === 1) image.files.set(dest, src);
          if (last && src === INSTALL_SCRIPT) installScriptImagePath = dest;
        }
      }
    } else if (kw === 'RUN') {
      const text = args.join(' ');
      if (last && installScriptImagePath && text.includes(installScriptImagePath)) runsInstallScript = true;
      // The repository's scripts a RUN names (the build stage works in a copy of the tree).
      for (const m of text.matchAll(/(?:^|[\s;&|])(scripts\/[\w.-]+\.sh)\b/g)) {
        if (!fs.existsSync(path.join(ctx.root, m[1]))) errors.push(`${where}: RUN names ${m[1]}, which does not exist in the repository`);
      }
    } else if (kw === 'ENTRYPOINT' || kw === 'CMD') {
      if (!last) continue;
      const v = jsonArgs(ins.getArgumentsContent ? ins.getArgumentsContent() : args.join(' '));
      if (!v) errors.push(`${where}: ${kw} must be in exec (JSON) form so flags are passed as they are`);
      if (kw === 'ENTRYPOINT') image.entrypoint = v;
      else image.cmd = v;
    } else if (kw === 'HEALTHCHECK' && last) {
      const content = ins.getArgumentsContent();
      const at = content.indexOf('CMD');
      const v = at >= 0 ? jsonArgs(content.slice(at + 3).trim()) : null;
      if (!v) errors.push(`${where}: HEALTHCHECK needs CMD in exec (JSON) form`);
      image.healthcheck = v;
    } else if (kw === 'EXPOSE' && last) {
      image.expose.push(...args.map((a) => Number(a.split('/')[0])));
    } else if (kw === 'USER' && last) {
      image.user = args[0];
    } else if (kw === 'VOLUME' && last) {
      image.volumes.push(...(jsonArgs(args.join(' ')) || args));
    }
  }
  if (stages.length < 2) errors.push(`${rel}: not multi-stage (${stages.length} stage)`);
  if (!fs.existsSync(path.join(ctx.root, INSTALL_SCRIPT))) {
    errors.push(`${rel}: the install script ${INSTALL_SCRIPT} does not exist`);
  }
  if (!installScriptImagePath) errors.push(`${rel}: the runtime stage does not COPY ${INSTALL_SCRIPT}`);
  else if (!runsInstallScript) errors.push(`${rel}: the runtime stage never RUNs ${installScriptImagePath} (${INSTALL_SCRIPT})`);
  const packageTest = path.join(ctx.root, 'scripts/package-test.sh');
  if (!fs.existsSync(packageTest) || !fs.readFileSync(packageTest, 'utf8').includes('install-deb.sh')) {
    errors.push(`${rel}: scripts/package-test.sh does not run install-deb.sh, so the image's install path is not the tested one`);
  }
  const uid = image.user ? image.user.split(':')[0] : '';
  if (!/^\d+$/.test(uid) || uid === '0') {
    errors.push(`${rel}: USER must be a numeric non-root UID (Kubernetes' runAsNonRoot checks it), got '${image.user}'`);
  }
  for (const p of [8000, 8001, 8002]) {
    if (!image.expose.includes(p)) errors.push(`${rel}: EXPOSE lacks ${p}`);
  }
  if (!image.entrypoint || image.entrypoint[0] !== 'ensemble-server') {
    errors.push(`${rel}: ENTRYPOINT must be ["ensemble-server"]`);
  }
  return {errors, image};
}

// The config file an image path resolves to (a file COPY'd into the image).
function imageFile(image, p) {
  const src = image && image.files.get(p);
  return src ? {rel: src} : null;
}

// Checks a server's argv (the words after ensemble-server) and returns its
// ports; configFor(path) gives {rel, text} for the --config path or null.
function checkServer(ctx, args, where, configFor) {
  const {errors, values} = checkArgs(ctx.binDir, 'ensemble-server', args, where);
  ctx.described.serverArgs.push({where, args: args.map(String)});
  const configPath = values.get('--config');
  let configText = null;
  if (typeof configPath !== 'string') {
    errors.push(`${where}: no --config`);
  } else {
    const found = configFor(configPath);
    if (!found) errors.push(`${where}: --config ${configPath} is no file the image or manifests provide`);
    else {
      configText = found.text;
      ctx.serverConfigs.set(found.name, {where: found.where, text: found.text});
    }
  }
  const {ports, config} = serverPorts(values, configText);
  if (configText && config.listen_address !== '0.0.0.0') {
    errors.push(`${where}: its config listens on ${config.listen_address || '127.0.0.1 (the default)'}: a container must listen on 0.0.0.0`);
  }
  return {errors, ports, config, values};
}

// A health check's argv (ensemble-cli ...) must ask the server's own port.
function checkHealthcheck(ctx, argv, ports, where) {
  if (!argv || argv[0] !== 'ensemble-cli') return [`${where}: the health check must run ensemble-cli, got ${JSON.stringify(argv)}`];
  const {errors, values} = checkArgs(ctx.binDir, 'ensemble-cli', argv.slice(1), where);
  ctx.described.healthchecks.push({where, argv});
  if (values.get('(subcommand)') !== 'ready') errors.push(`${where}: the health check must ask 'ready'`);
  const server = String(values.get('--server') || '');
  const port = Number(server.split(':').pop());
  const want = values.has('--http') ? ports.http : ports.grpc;
  if (port !== want) errors.push(`${where}: the health check asks port ${port}, the server listens on ${want}`);
  return errors;
}

function checkDockerImage(ctx) {
  const {errors, image} = checkDockerfile(ctx);
  if (!image || !image.entrypoint) return {errors, image};
  const configFor = (p) => {
    const f = imageFile(image, p);
    if (!f || !fs.existsSync(path.join(ctx.root, f.rel))) return null;
    return {name: `image:${path.basename(f.rel)}`, where: f.rel, text: fs.readFileSync(path.join(ctx.root, f.rel), 'utf8')};
  };
  const server = checkServer(ctx, image.cmd || [], 'docker/Dockerfile CMD', configFor);
  errors.push(...server.errors);
  for (const [which, port] of Object.entries(server.ports)) {
    if (!image.expose.includes(port)) errors.push(`docker/Dockerfile: the server's ${which} port ${port} is not EXPOSEd`);
  }
  if (server.config.repository && !image.volumes.includes(server.config.repository)) {
    errors.push(`docker/Dockerfile: the repository ${server.config.repository} is not a VOLUME`);
  }
  errors.push(...checkHealthcheck(ctx, image.healthcheck, server.ports, 'docker/Dockerfile HEALTHCHECK'));
  image.configFor = configFor;
  return {errors, image};
}

// Words of the `ensemble-*` commands inside a `sh -c` script.
function shellCommands(script) {
  const out = [];
  for (const part of script.split(/;|&&|\|\||\bthen\b|\belse\b/)) {
    const words = part.trim().split(/\s+/).filter(Boolean).map((w) => w.replace(/^['"]|['"]$/g, ''));
    const at = words.findIndex((w) => /^ensemble-[a-z-]+$/.test(w));
    if (at >= 0) out.push(words.slice(at));
  }
  return out;
}

function checkCompose(ctx, image) {
  const rel = 'docker/compose.yaml';
  const errors = [];
  const file = path.join(ctx.root, rel);
  if (!fs.existsSync(file)) return [`${rel}: missing`];
  const doc = YAML.parseDocument(fs.readFileSync(file, 'utf8'));
  if (doc.errors.length) return doc.errors.map((e) => `${rel}: YAML: ${e.message}`);
  const compose = doc.toJS();
  // The compose-spec JSON schema (draft-07), vendored from
  // github.com/compose-spec/compose-spec (schemas/README.md).
  // It names draft-07 as https://...; Ajv's default draft is draft-07 under
  // its http:// name, so the $schema line is dropped, not the draft changed.
  const {$schema, ...schema} = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'schemas', 'compose-spec.json'), 'utf8'));
  const ajv = new Ajv({strict: false, allErrors: true});
  const validate = ajv.compile(schema);
  if (!validate(compose)) {
    for (const e of validate.errors) errors.push(`${rel}: compose-spec: ${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
  }
  const services = compose.services || {};
  // What the schema leaves to compose itself (compose-go): durations are Go
  // durations ("1m30s", "500ms"); restart is one of four policies.
  for (const [name, svc] of Object.entries(services)) {
    const durations = {stop_grace_period: svc.stop_grace_period, ...Object.fromEntries(
      ['interval', 'timeout', 'start_period', 'start_interval'].map((k) => [`healthcheck.${k}`, (svc.healthcheck || {})[k]]))};
    for (const [key, value] of Object.entries(durations)) {
      if (value !== undefined && !/^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$/.test(String(value))) {
        errors.push(`${rel}: services.${name}.${key}: '${value}' is not a duration (e.g. 30s, 1m30s)`);
      }
    }
    if (svc.restart !== undefined && !['no', 'always', 'on-failure', 'unless-stopped'].includes(String(svc.restart).split(':')[0])) {
      errors.push(`${rel}: services.${name}.restart: '${svc.restart}' is no restart policy`);
    }
  }
  const dir = path.dirname(file);
  let serverPortsSeen = null;
  for (const [name, svc] of Object.entries(services)) {
    const where = `${rel}: services.${name}`;
    if (svc.build) {
      const df = path.resolve(dir, svc.build.context || '.', svc.build.dockerfile || 'Dockerfile');
      if (!fs.existsSync(df)) errors.push(`${where}: build file ${df} does not exist`);
    }
    for (const v of svc.volumes || []) {
      const src = typeof v === 'string' ? v.split(':')[0] : v.source;
      if (src && (src.startsWith('.') || src.startsWith('/'))) {
        if (!fs.existsSync(path.resolve(dir, src))) errors.push(`${where}: bind mount source ${src} does not exist`);
      } else if (src && !(compose.volumes && src in compose.volumes)) {
        errors.push(`${where}: volume ${src} is not declared under volumes:`);
      }
    }
    const usesImage = svc.image === 'ensemble-serve:latest';
    if (!usesImage) continue;
    const entry = svc.entrypoint || (image && image.entrypoint);
    const command = svc.command || (image && image.cmd) || [];
    if (entry && entry[0] === 'ensemble-server') {
      const server = checkServer(ctx, [...entry.slice(1), ...command], `${where}.command`, image ? image.configFor : () => null);
      errors.push(...server.errors);
      serverPortsSeen = server.ports;
      const published = (svc.ports || []).map((p) => Number(String(p).split(':').pop().split('/')[0]));
      for (const [which, port] of Object.entries(server.ports)) {
        if (!published.includes(port)) errors.push(`${where}: the server's ${which} port ${port} is not published`);
      }
      if (svc.healthcheck) errors.push(...checkHealthcheck(ctx, svc.healthcheck.test.slice(1), server.ports, `${where}.healthcheck`));
      const drain = (server.config.limits || {}).drain_timeout_ms || 10000;
      const grace = parseDuration(svc.stop_grace_period || '10s');
      if (grace * 1000 <= drain) errors.push(`${where}: stop_grace_period ${svc.stop_grace_period} does not cover drain_timeout_ms ${drain}`);
    } else if (entry && entry[0] === '/bin/sh') {
      for (const words of shellCommands(command.join(' '))) {
        const res = checkArgs(ctx.binDir, words[0], words.slice(1), `${where}.command`);
        errors.push(...res.errors);
      }
    } else {
      errors.push(`${where}: unexpected entrypoint ${JSON.stringify(entry)}`);
    }
  }
  // Prometheus scrapes the server through the config compose mounts at
  // /etc/prometheus/prometheus.yml.
  const prom = services.prometheus;
  const promMount = prom && (prom.volumes || []).map((v) => v.split(':')).find(([, target]) => target === '/etc/prometheus/prometheus.yml');
  if (prom && !promMount) errors.push(`${rel}: prometheus mounts no /etc/prometheus/prometheus.yml`);
  if (promMount && serverPortsSeen && fs.existsSync(path.resolve(dir, promMount[0]))) {
    const cfg = YAML.parse(fs.readFileSync(path.resolve(dir, promMount[0]), 'utf8'));
    const targets = cfg.scrape_configs.flatMap((s) => (s.static_configs || []).flatMap((c) => c.targets));
    const host = prom.network_mode === 'service:server' ? '127.0.0.1' : 'server';
    if (!targets.includes(`${host}:${serverPortsSeen.metrics}`)) {
      errors.push(`${rel}: ${promMount[0]} scrapes ${targets.join(', ')}, not the server's ${host}:${serverPortsSeen.metrics}`);
    }
  }
  errors.push(...checkGrafana(ctx, services, dir));
  return errors;
}

// Grafana's provisioning (docker/monitoring/grafana/provisioning/): the data
// source must reach Prometheus where compose runs it, and the dashboard
// provider must read the folder the dashboard is mounted into.
function checkGrafana(ctx, services, dir) {
  const errors = [];
  const grafana = services.grafana;
  const prom = services.prometheus;
  if (!grafana || !prom) return ['docker/compose.yaml: needs the prometheus and grafana services'];
  const mounts = (grafana.volumes || []).map((v) => v.split(':')).map(([src, target]) => ({src: path.resolve(dir, src), target}));
  const provisioning = mounts.find((m) => m.target === '/etc/grafana/provisioning');
  if (!provisioning) return ['docker/compose.yaml: grafana mounts no /etc/grafana/provisioning'];
  const read = (sub) => {
    const folder = path.join(provisioning.src, sub);
    if (!fs.existsSync(folder)) return [];
    return fs.readdirSync(folder).filter((f) => /\.ya?ml$/.test(f)).map((f) => ({rel: path.relative(ctx.root, path.join(folder, f)), doc: YAML.parse(fs.readFileSync(path.join(folder, f), 'utf8'))}));
  };
  const listen = ((prom.command || []).find((a) => a.startsWith('--web.listen-address=')) || '=:9090').split('=')[1];
  const promHost = prom.network_mode && prom.network_mode.startsWith('service:') ? prom.network_mode.slice(8) : 'prometheus';
  const want = `http://${promHost}:${listen.split(':').pop()}`;
  const sources = read('datasources').flatMap(({rel, doc}) => (doc.datasources || []).map((d) => ({rel, d})));
  if (!sources.some(({d}) => d.type === 'prometheus' && d.url === want)) {
    errors.push(`docker/compose.yaml: no Grafana prometheus data source at ${want} (provisioned: ${sources.map(({rel, d}) => `${rel}: ${d.url}`).join(', ') || 'none'})`);
  }
  const dashboards = mounts.filter((m) => m.src.endsWith('.json'));
  for (const {rel, doc} of read('dashboards')) {
    for (const p of doc.providers || []) {
      const folder = (p.options || {}).path;
      const inside = dashboards.filter((m) => path.dirname(m.target) === folder);
      if (!inside.length) errors.push(`${rel}: provider ${p.name} reads ${folder}, where compose mounts no dashboard`);
      for (const m of inside) {
        try {
          JSON.parse(fs.readFileSync(m.src, 'utf8'));
        } catch (e) {
          errors.push(`docker/compose.yaml: dashboard ${m.src} is not JSON: ${e.message}`);
        }
      }
    }
  }
  if (!read('dashboards').length) errors.push('docker/compose.yaml: no Grafana dashboard provider provisioned');
  return errors;
}

function parseDuration(s) {
  const m = /^(\d+)(ms|s|m)$/.exec(String(s));
  if (!m) return 0;
  return Number(m[1]) * {ms: 0.001, s: 1, m: 60}[m[2]];
}

module.exports = {checkDockerImage, checkCompose, checkServer, checkHealthcheck};
