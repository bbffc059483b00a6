#!/usr/bin/env node
// Writes tests/deploy/schemas/kserve-*.json from KServe's published CRDs
// (config/crd/full/serving.kserve.io_{servingruntimes,inferenceservices}.yaml
// of github.com/kserve/kserve). No npm package ships them, and the full
// InferenceService CRD is 2 MB (it embeds a PodSpec per component), so the
// openAPIV3Schema of the served version is vendored PRUNED:
//   - a subtree of at most KEEP_BYTES (as JSON) is kept whole;
//   - a larger one on a DESCEND path is kept, its children judged the same way;
//   - any other larger one becomes {"type": ..., "x-es-pruned": "<path>"}.
// tests/deploy/validate.js rejects a manifest that puts anything under a
// pruned node ("re-vendor with that path in DESCEND"), so pruning never
// lets a field through unchecked.
//
//   node tests/deploy/tools/vendor-kserve-schemas.js KSERVE_CHECKOUT [COMMIT]
'use strict';
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

const KEEP_BYTES = 6000;
const TARGETS = [
  {
    crd: 'config/crd/full/serving.kserve.io_servingruntimes.yaml',
    version: 'v1alpha1',
    out: 'kserve-servingruntime-v1alpha1.json',
    descend: ['spec', 'spec.containers', 'spec.containers[]', 'spec.volumes', 'spec.volumes[]'],
  },
  {
    crd: 'config/crd/full/serving.kserve.io_inferenceservices.yaml',
    version: 'v1beta1',
    out: 'kserve-inferenceservice-v1beta1.json',
    descend: ['spec', 'spec.predictor', 'spec.predictor.model'],
  },
];

function prune(node, where, descend) {
  if (JSON.stringify(node).length <= KEEP_BYTES) return node;
  if (!descend.has(where)) {
    const marker = {'x-es-pruned': where || '(root)'};
    if (node.type) marker.type = node.type;
    return marker;
  }
  const out = {...node};
  if (node.properties) {
    out.properties = {};
    for (const [name, child] of Object.entries(node.properties)) {
      out.properties[name] = prune(child, where ? `${where}.${name}` : name, descend);
    }
  }
  if (node.items) out.items = prune(node.items, `${where}[]`, descend);
  return out;
}

function main() {
  const [checkout, commit] = process.argv.slice(2);
  if (!checkout) {
    console.error('usage: vendor-kserve-schemas.js KSERVE_CHECKOUT [COMMIT]');
    process.exit(2);
  }
  for (const t of TARGETS) {
    const crd = YAML.parse(fs.readFileSync(path.join(checkout, t.crd), 'utf8'));
    const version = crd.spec.versions.find((v) => v.name === t.version);
    if (!version) throw new Error(`${t.crd}: no version ${t.version}`);
    const schema = prune(version.schema.openAPIV3Schema, '', new Set(['', ...t.descend]));
    const doc = {
      'x-es-source': `kserve/kserve ${commit || '(unknown commit)'} ${t.crd}, version ${t.version}`,
      'x-es-group': crd.spec.group,
      'x-es-kind': crd.spec.names.kind,
      'x-es-version': t.version,
      schema,
    };
    const file = path.join(__dirname, '..', 'schemas', t.out);
    fs.writeFileSync(file, JSON.stringify(doc) + '\n');
    console.log(`${file}: ${fs.statSync(file).size} bytes`);
  }
}

main();
