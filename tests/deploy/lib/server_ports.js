// What ensemble-server listens on, given its flags and its config file:
// a flag wins, then the config's key, then the built-in default (the rules
// of docs/configuration.md). Shared by every container check.
'use strict';
const YAML = require('yaml');

const DEFAULTS = {http: 8000, grpc: 8001, metrics: 8002};
const FLAGS = {http: '--http-port', grpc: '--grpc-port', metrics: '--metrics-port'};
const KEYS = {http: 'http_port', grpc: 'grpc_port', metrics: 'metrics_port'};
const DISABLE = {http: '--no-http', metrics: '--no-metrics'};

// values: Map(flag -> value) from help.checkArgs; configText: the YAML the
// --config path resolves to (or null when it cannot be resolved).
function serverPorts(values, configText) {
  const config = configText ? YAML.parse(configText) || {} : {};
  const ports = {};
  for (const which of Object.keys(DEFAULTS)) {
    if (DISABLE[which] && values.has(DISABLE[which])) continue;
    if (values.has(FLAGS[which])) ports[which] = Number(values.get(FLAGS[which]));
    else if (config[KEYS[which]] !== undefined) ports[which] = Number(config[KEYS[which]]);
    else ports[which] = DEFAULTS[which];
  }
  return {ports, config};
}

module.exports = {serverPorts};
