#!/usr/bin/env node
// Offline validation of ensemble-serve's deployment files (docs/deploy.md,
// "What is checked offline"): docker/Dockerfile, docker/compose.yaml,
// docker/kubernetes/*.yaml and docker/kserve/*.yaml.
//
//   node tests/deploy/validate.js --root REPO --bin-dir build/bin [--write-configs DIR] [--describe FILE]
//   node tests/deploy/validate.js --root A --root B ... --bin-dir build/bin --results FILE
//
// Prints one `error: ...` line per problem and exits 1 if there is any, else
// prints `ok: ...` lines and exits 0. With several roots (the broken copies
// test_deploy makes: one node start and one --help of each binary for all
// of them) it writes FILE, a JSON object {ROOT: {"exit": N, "output": TEXT}}
// holding for each root what a run on it alone prints and exits with, and
// exits 0. --write-configs writes every server
// config the containers use (the image's, each ConfigMap's) to DIR/NAME.yaml
// and their list to DIR/index.txt, for test_deploy to load with the real
// config parser. --describe writes, as JSON, what test_deploy then runs
// against a real server: every server argv, every health-check argv and
// every gRPC probe's service name.
'use strict';
const fs = require('fs');
const path = require('path');
const {checkDockerImage, checkCompose} = require('./lib/containers');
const {checkKubernetes, checkKServe} = require('./lib/kube');

function parseArgs(argv) {
  const opts = {roots: [], binDir: null, writeConfigs: null, describe: null, results: null};
  for (let i = 0; i < argv.length; i++) {
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
      return argv[++i];
    };
    if (argv[i] === '--root') opts.roots.push(path.resolve(next()));
    else if (argv[i] === '--results') opts.results = path.resolve(next());
    else if (argv[i] === '--bin-dir') opts.binDir = path.resolve(next());
    else if (argv[i] === '--write-configs') opts.writeConfigs = path.resolve(next());
    else if (argv[i] === '--describe') opts.describe = path.resolve(next());
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  if (!opts.binDir) throw new Error('--bin-dir is required (the folder of ensemble-server, ensemble-cli, ...)');
  if (opts.roots.length === 0) opts.roots.push(path.resolve(__dirname, '..', '..'));
  if (opts.roots.length > 1 && !opts.results) throw new Error('several --root need --results FILE');
  if (opts.results && (opts.writeConfigs || opts.describe)) {
    throw new Error('--results does not go with --write-configs or --describe (one root only)');
  }
  return opts;
}

// Validates the tree at `root`: {code, lines}, what a run on it prints.
function validateRoot(opts, root) {
  const ctx = {...opts, root, serverConfigs: new Map(), described: {serverArgs: [], healthchecks: [], grpcProbes: []}};
  const sections = [];
  const image = checkDockerImage(ctx);
  sections.push(['docker/Dockerfile', image.errors]);
  sections.push(['docker/compose.yaml', checkCompose(ctx, image.image)]);
  const kube = checkKubernetes(ctx);
  sections.push(['docker/kubernetes', kube.errors]);
  sections.push(['docker/kserve', checkKServe(ctx, kube.docs)]);

  if (opts.writeConfigs) {
    fs.mkdirSync(opts.writeConfigs, {recursive: true});
    const index = [];
    for (const [name, {where, text}] of ctx.serverConfigs) {
      const file = name.replace(/[^A-Za-z0-9_.-]/g, '_');
      fs.writeFileSync(path.join(opts.writeConfigs, file), text);
      index.push(`${file}\t${where}`);
    }
    fs.writeFileSync(path.join(opts.writeConfigs, 'index.txt'), index.join('\n') + '\n');
  }

  if (opts.describe) fs.writeFileSync(opts.describe, JSON.stringify(ctx.described, null, 1) + '\n');

  const lines = [];
  let failed = 0;
  for (const [name, errors] of sections) {
    for (const e of errors) lines.push(`error: ${e}`);
    if (errors.length) failed++;
    else lines.push(`ok: ${name}`);
  }
  lines.push(`server configs used by containers: ${[...ctx.serverConfigs.keys()].join(', ')}`);
  return {code: failed ? 1 : 0, lines};
}

function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`usage error: ${e.message}`);
    return 2;
  }
  if (!opts.results) {
    const {code, lines} = validateRoot(opts, opts.roots[0]);
    for (const line of lines) console.log(line);
    return code;
  }
  const results = {};
  for (const root of opts.roots) {
    let run;
    try {
      run = validateRoot(opts, root);
    } catch (e) {
      // What a run on this root alone would have ended with (node's own report).
      run = {code: 1, lines: [`error: ${e.stack || e}`]};
    }
    results[root] = {exit: run.code, output: run.lines.join('\n') + '\n'};
  }
  fs.writeFileSync(opts.results, JSON.stringify(results, null, 1) + '\n');
  console.log(`validated ${opts.roots.length} trees: results in ${opts.results}`);
  return 0;
}

process.exitCode = main();
