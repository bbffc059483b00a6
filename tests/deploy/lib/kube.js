// Checks of docker/kubernetes/ and docker/kserve/: every document against
// its published schema (Kubernetes' OpenAPI through kubernetes-models,
// Prometheus Operator's through @kubernetes-models/prometheus-operator,
// KServe's CRDs vendored in schemas/), then what no schema can see: labels
// that select, names that resolve, probes and ports that match the server's
// flags, one cuda host per requested GPU.
'use strict';
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const Ajv = require('ajv').default;
const {checkServer} = require('./containers');
const {checkArgs} = require('./help');
const {unknownFields} = require('./strict_fields');

function loadDocs(ctx, folder) {
  const docs = [];
  const errors = [];
  const dir = path.join(ctx.root, folder);
  if (!fs.existsSync(dir)) return {docs, errors: [`${folder}: missing`]};
  for (const name of fs.readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort()) {
    const rel = `${folder}/${name}`;
    for (const d of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, name), 'utf8'))) {
      if (d.errors.length) errors.push(...d.errors.map((e) => `${rel}: YAML: ${e.message}`));
      const obj = d.toJS();
      if (obj) docs.push({rel, obj, where: `${rel}: ${obj.kind}/${obj.metadata && obj.metadata.name}`});
    }
  }
  return {docs, errors};
}

// kubernetes-models' class for a built-in kind, or Prometheus Operator's.
function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const candidates = [
    `kubernetes-models/${group ? group + '/' : ''}${version}/${kind}`,
    `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`,
  ];
  for (const c of candidates) {
    try {
      return {Model: require(c)[kind], file: require.resolve(c)};
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND' && e.code !== 'ERR_PACKAGE_PATH_NOT_EXPORTED') throw e;
    }
  }
  return null;
}

// KServe's vendored CRD schema as a validator: a structural schema rejects
// fields it does not declare (kubectl's --validate=strict does the same),
// and a node the vendoring pruned rejects any value (re-vendor to check it).
function kserveValidator(file) {
  const vendored = JSON.parse(fs.readFileSync(file, 'utf8'));
  const strict = (node) => {
    if (!node || typeof node !== 'object') return node;
    if (node['x-es-pruned']) return {not: {}, 'x-es-pruned': node['x-es-pruned']};
    const out = {...node};
    if (out.properties) {
      out.properties = Object.fromEntries(Object.entries(out.properties).map(([k, v]) => [k, strict(v)]));
      if (!out['x-kubernetes-preserve-unknown-fields'] && out.additionalProperties === undefined) out.additionalProperties = false;
    }
    if (out.items) out.items = strict(out.items);
    if (out.additionalProperties && typeof out.additionalProperties === 'object') out.additionalProperties = strict(out.additionalProperties);
    return out;
  };
  const ajv = new Ajv({strict: false, allErrors: true});
  ajv.addKeyword({keyword: 'x-es-pruned', schemaType: 'string'});
  ajv.addFormat('int32', true).addFormat('int64', true).addFormat('double', true).addFormat('float', true).addFormat('byte', true).addFormat('date-time', true);
  return {
    apiVersion: `${vendored['x-es-group']}/${vendored['x-es-version']}`,
    kind: vendored['x-es-kind'],
    validate: ajv.compile(strict(vendored.schema)),
  };
}

function selects(selector, labels) {
  const want = (selector && (selector.matchLabels || selector)) || {};
  return Object.keys(want).length > 0 && Object.entries(want).every(([k, v]) => labels && labels[k] === v);
}

function validateSchemas(ctx, docs) {
  const errors = [];
  const kserve = fs.readdirSync(path.join(__dirname, '..', 'schemas')).filter((f) => f.startsWith('kserve-')).map((f) => kserveValidator(path.join(__dirname, '..', 'schemas', f)));
  for (const {obj, where} of docs) {
    if (!obj.apiVersion || !obj.kind) {
      errors.push(`${where}: no apiVersion/kind`);
      continue;
    }
    const custom = kserve.find((k) => k.apiVersion === obj.apiVersion && k.kind === obj.kind);
    if (custom) {
      if (!custom.validate(obj)) {
        for (const e of custom.validate.errors) {
          const pruned = e.parentSchema && e.parentSchema['x-es-pruned'];
          errors.push(`${where}: KServe schema: ${e.instancePath || '/'} ${pruned ? `is pruned from the vendored schema (re-vendor with ${pruned} in DESCEND)` : e.message} ${e.params && e.params.additionalProperty ? `'${e.params.additionalProperty}'` : ''}`.trim());
        }
      }
      continue;
    }
    const model = modelClass(obj.apiVersion, obj.kind);
    if (!model) {
      errors.push(`${where}: no schema known for ${obj.apiVersion} ${obj.kind}`);
      continue;
    }
    try {
      new model.Model(obj).validate();
    } catch (e) {
      errors.push(`${where}: Kubernetes schema: ${e.message}`);
    }
    for (const e of unknownFields(obj, model.file)) errors.push(`${where}: Kubernetes schema (strict): ${e}`);
  }
  return errors;
}

// The server config a container's --config path resolves to: a volumeMount
// whose volume is a ConfigMap of these manifests.
function configResolver(docs, podSpec, container) {
  return (p) => {
    const mount = (container.volumeMounts || []).find((m) => m.mountPath === p || p.startsWith(m.mountPath + '/'));
    if (!mount) return null;
    const volume = (podSpec.volumes || []).find((v) => v.name === mount.name);
    if (!volume || !volume.configMap) return null;
    const cm = docs.find((d) => d.obj.kind === 'ConfigMap' && d.obj.metadata.name === volume.configMap.name);
    if (!cm) return null;
    const key = mount.subPath || path.relative(mount.mountPath, p);
    const text = cm.obj.data && cm.obj.data[key];
    return text ? {name: `${cm.obj.metadata.name}:${key}`, where: cm.rel, text} : null;
  };
}

function checkPod(ctx, docs, podSpec, where, imageEntrypoint) {
  const errors = [];
  const results = [];
  for (const volume of podSpec.volumes || []) {
    if (volume.configMap && !docs.some((d) => d.obj.kind === 'ConfigMap' && d.obj.metadata.name === volume.configMap.name)) {
      errors.push(`${where}: volume ${volume.name}: no ConfigMap ${volume.configMap.name}`);
    }
    if (volume.persistentVolumeClaim && !ctx.claims.has(volume.persistentVolumeClaim.claimName)) {
      errors.push(`${where}: volume ${volume.name}: no PersistentVolumeClaim ${volume.persistentVolumeClaim.claimName}`);
    }
  }
  for (const c of podSpec.containers || []) {
    const cw = `${where} container ${c.name}`;
    for (const m of c.volumeMounts || []) {
      if (!(podSpec.volumes || []).some((v) => v.name === m.name)) errors.push(`${cw}: mount of undeclared volume ${m.name}`);
    }
    const argv = [...(c.command || imageEntrypoint), ...(c.args || [])];
    const binary = path.basename(argv[0]);
    if (binary === 'ensemble-server') {
      const server = checkServer(ctx, argv.slice(1), `${cw} args`, configResolver(docs, podSpec, c));
      errors.push(...server.errors);
      results.push({container: c, server});
    } else {
      errors.push(...checkArgs(ctx.binDir, binary, argv.slice(1), `${cw} args`).errors);
    }
  }
  return {errors, results};
}

function checkProbe(ctx, probe, name, server, ports, where, healthServices) {
  if (!probe) return [`${where}: no ${name}`];
  const errs = [];
  const resolve = (p) => (typeof p === 'string' ? (ports.find((x) => x.name === p) || {}).containerPort : p);
  if (probe.grpc) {
    ctx.described.grpcProbes.push({where: `${where} ${name}`, service: probe.grpc.service || ''});
    if (probe.grpc.port !== server.ports.grpc) errs.push(`${where}: ${name} asks gRPC port ${probe.grpc.port}, the server's is ${server.ports.grpc}`);
    if (!healthServices.includes(probe.grpc.service || '')) {
      errs.push(`${where}: ${name} asks grpc.health.v1 for service '${probe.grpc.service}', which the server answers NOT_FOUND (it knows: ${healthServices.map((s) => `'${s}'`).join(', ')})`);
    }
  } else if (probe.httpGet) {
    if (resolve(probe.httpGet.port) !== server.ports.http) errs.push(`${where}: ${name} asks HTTP port ${probe.httpGet.port}, the server's is ${server.ports.http}`);
    if (!['/v2/health/live', '/v2/health/ready'].includes(probe.httpGet.path)) errs.push(`${where}: ${name} path ${probe.httpGet.path} is no health route`);
  } else {
    errs.push(`${where}: ${name} is neither grpc nor httpGet`);
  }
  return errs;
}

// The service names grpc.health.v1 answers, read from the server's source.
function healthServices(ctx) {
  const src = fs.readFileSync(path.join(ctx.root, 'server/grpc/grpc_service.cc'), 'utf8');
  const m = /service\.empty\(\) && service != "([^"]+)"/.exec(src);
  const names = m ? ['', m[1]] : [''];
  for (const e of src.matchAll(/service == "([^"]+)"/g)) names.push(e[1]);
  return names;
}

function checkKubernetes(ctx) {
  const {docs, errors} = loadDocs(ctx, 'docker/kubernetes');
  errors.push(...validateSchemas(ctx, docs));
  ctx.claims = new Set(docs.filter((d) => d.obj.kind === 'PersistentVolumeClaim').map((d) => d.obj.metadata.name));
  const known = healthServices(ctx);
  const deployments = docs.filter((d) => d.obj.kind === 'Deployment');
  if (!deployments.length) errors.push('docker/kubernetes: no Deployment');
  const podLabels = [];
  for (const {obj, where} of [...deployments, ...docs.filter((d) => d.obj.kind === 'Job')]) {
    const tpl = obj.spec.template;
    if (obj.kind === 'Deployment' && !selects(obj.spec.selector, tpl.metadata.labels)) errors.push(`${where}: selector does not match the pod template's labels`);
    const pod = checkPod(ctx, docs, tpl.spec, where, ['ensemble-server']);
    errors.push(...pod.errors);
    if (obj.kind !== 'Deployment') continue;
    podLabels.push({labels: tpl.metadata.labels, ports: pod.results.flatMap((r) => r.container.ports || [])});
    const grace = (tpl.spec.terminationGracePeriodSeconds || 30) * 1000;
    for (const {container: c, server} of pod.results) {
      const ports = c.ports || [];
      for (const [which, port] of Object.entries(server.ports)) {
        const p = ports.find((x) => x.name === which);
        if (!p || p.containerPort !== port) errors.push(`${where}: container port '${which}' is ${p ? p.containerPort : 'missing'}, the server listens on ${port}`);
      }
      errors.push(...checkProbe(ctx, c.readinessProbe, 'readinessProbe', server, ports, where, known));
      errors.push(...checkProbe(ctx, c.livenessProbe, 'livenessProbe', server, ports, where, known));
      if (c.startupProbe) errors.push(...checkProbe(ctx, c.startupProbe, 'startupProbe', server, ports, where, known));
      if (!c.resources || !c.resources.requests) errors.push(`${where}: no resource requests`);
      const drain = (server.config.limits || {}).drain_timeout_ms || 10000;
      if (grace <= drain) errors.push(`${where}: terminationGracePeriodSeconds does not cover drain_timeout_ms ${drain}`);
      // One model host per GPU the pod gets: cuda:0 .. cuda:N-1.
      const gpus = Number(((c.resources || {}).limits || {})['nvidia.com/gpu'] || 0);
      const cuda = (server.config.hosts || []).map((h) => h.device).filter((d) => String(d).startsWith('cuda:'));
      const want = Array.from({length: gpus}, (_, i) => `cuda:${i}`);
      if (gpus > 0 && JSON.stringify([...cuda].sort()) !== JSON.stringify([...want].sort())) {
        errors.push(`${where}: nvidia.com/gpu is ${gpus} but the config's cuda hosts are [${cuda.join(', ')}]: want one per GPU, ${want.join(', ')}`);
      }
      if (gpus > 0 && !(tpl.spec.affinity && tpl.spec.affinity.podAntiAffinity)) errors.push(`${where}: a GPU Deployment needs pod anti-affinity (one pod per GPU node)`);
    }
  }
  const selectsPods = (selector) => podLabels.filter((p) => selects(selector, p.labels));
  for (const {obj, where} of docs) {
    if (obj.kind === 'Service') {
      const pods = selectsPods(obj.spec.selector);
      if (!pods.length) errors.push(`${where}: selects no Deployment's pods`);
      for (const p of obj.spec.ports || []) {
        for (const pod of pods) {
          const target = typeof p.targetPort === 'string' ? pod.ports.find((x) => x.name === p.targetPort) : pod.ports.find((x) => x.containerPort === (p.targetPort || p.port));
          if (!target) errors.push(`${where}: port ${p.name} targets ${p.targetPort}, which the pods do not declare`);
        }
      }
    } else if (obj.kind === 'PodDisruptionBudget') {
      if (!selectsPods(obj.spec.selector).length) errors.push(`${where}: selects no Deployment's pods`);
    } else if (obj.kind === 'PodMonitor') {
      const pods = selectsPods(obj.spec.selector);
      if (!pods.length) errors.push(`${where}: selects no Deployment's pods`);
      for (const e of obj.spec.podMetricsEndpoints || []) {
        if (!pods.every((p) => p.ports.some((x) => x.name === e.port))) errors.push(`${where}: endpoint port '${e.port}' is not a container port of the pods`);
      }
    }
  }
  const names = new Set(docs.map((d) => d.obj.kind));
  for (const kind of ['Service', 'PodDisruptionBudget', 'PodMonitor', 'PersistentVolumeClaim']) {
    if (!names.has(kind)) errors.push(`docker/kubernetes: no ${kind}`);
  }
  return {errors, docs};
}

const KSERVE_PROTOCOLS = ['v1', 'v2', 'grpc-v1', 'grpc-v2'];  // KServe's InferenceServiceProtocol values

function checkKServe(ctx, kubeDocs) {
  const {docs, errors} = loadDocs(ctx, 'docker/kserve');
  errors.push(...validateSchemas(ctx, docs));
  const runtimes = docs.filter((d) => d.obj.kind === 'ServingRuntime');
  const services = docs.filter((d) => d.obj.kind === 'InferenceService');
  if (!runtimes.length || !services.length) errors.push('docker/kserve: needs a ServingRuntime and an InferenceService');
  for (const {obj, where} of runtimes) {
    const protocols = obj.spec.protocolVersions || [];
    for (const p of protocols) if (!KSERVE_PROTOCOLS.includes(p)) errors.push(`${where}: protocolVersions has '${p}', not one of KServe's ${KSERVE_PROTOCOLS.join(', ')}`);
    if (!protocols.includes('v2')) errors.push(`${where}: protocolVersions must declare v2`);
    const pod = checkPod(ctx, docs, obj.spec, where, ['ensemble-server']);
    errors.push(...pod.errors);
    for (const {container: c, server} of pod.results) {
      // Without ports: KServe sends HTTP to 8080, and grpc-v2 goes to the predictor's h2c port.
      const http = (c.ports || []).find((p) => p.name !== 'h2c');
      const want = http ? http.containerPort : 8080;
      if (server.ports.http !== want) errors.push(`${where}: KServe sends HTTP to ${want}, the server listens on ${server.ports.http}`);
      if (server.config.repository !== '/mnt/models') errors.push(`${where}: the repository must be /mnt/models (where KServe's storage initializer puts storageUri), not ${server.config.repository}`);
    }
  }
  for (const {obj, where} of services) {
    const model = (obj.spec.predictor || {}).model || {};
    const rt = runtimes.find((r) => r.obj.metadata.name === model.runtime);
    if (!rt) {
      errors.push(`${where}: runtime '${model.runtime}' is no ServingRuntime here`);
      continue;
    }
    const format = model.modelFormat || {};
    if (!(rt.obj.spec.supportedModelFormats || []).some((f) => f.name === format.name && (!format.version || f.version === format.version))) {
      errors.push(`${where}: model format ${format.name}/${format.version} is not supported by runtime ${model.runtime}`);
    }
    if (model.protocolVersion && !(rt.obj.spec.protocolVersions || []).includes(model.protocolVersion)) {
      errors.push(`${where}: protocolVersion ${model.protocolVersion} is not among the runtime's ${rt.obj.spec.protocolVersions}`);
    }
    const pvc = /^pvc:\/\/([^/]+)\//.exec(model.storageUri || '');
    if (pvc && !kubeDocs.some((d) => d.obj.kind === 'PersistentVolumeClaim' && d.obj.metadata.name === pvc[1])) {
      errors.push(`${where}: storageUri names PVC ${pvc[1]}, which docker/kubernetes does not create`);
    }
  }
  return errors;
}

module.exports = {checkKubernetes, checkKServe};
