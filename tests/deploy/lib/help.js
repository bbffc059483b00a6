// A program's command line as its own --help describes it (CLI11's format),
// and checks of argument vectors against it. The help text is the truth:
// every flag a Dockerfile, compose file or manifest passes must be one the
// binary built from this tree accepts, with a value of the declared kind.
'use strict';
const {execFileSync} = require('child_process');
const path = require('path');

const cache = new Map();

// Parses `BINARY --help` (and `BINARY SUB --help` for each subcommand) into
// {options: Map(name -> {takesValue, min, max}), subcommands: Map(name -> spec)}.
function parseHelp(text) {
  const options = new Map();
  const subcommands = new Set();
  let section = '';
  for (const line of text.split('\n')) {
    if (/^\S.*:$/.test(line)) {
      section = line.slice(0, -1).trim();
      continue;
    }
    if (section === 'Options') {
      const m = /^\s+(?:-\w,)?(--[a-z0-9][a-z0-9-]*)(?:\s+(\S+))?/.exec(line);
      if (!m) continue;
      const kind = m[2] || '';
      // "--flag" alone, or followed by "Excludes:"/"Needs:" is a switch;
      // "--x TEXT", "--x INT:INT in [0 - 65535]", "--x UINT=1" take a value.
      const takesValue = /^(TEXT|INT|UINT|FLOAT|ENUM|BOOLEAN|FILE|DIR)/.test(kind);
      const range = /in \[(-?\d+) - (-?\d+)\]/.exec(line);
      options.set(m[1], {
        takesValue,
        integer: /^(INT|UINT)/.test(kind),
        min: range ? Number(range[1]) : undefined,
        max: range ? Number(range[2]) : undefined,
      });
    } else if (section === 'Subcommands') {
      const m = /^\s+([a-z][a-z0-9-]*)\s/.exec(line);
      if (m) subcommands.add(m[1]);
    }
  }
  return {options, subcommands};
}

function helpOf(binDir, binary, sub) {
  const key = `${binary} ${sub || ''}`;
  if (!cache.has(key)) {
    const argv = sub ? [sub, '--help'] : ['--help'];
    let text;
    try {
      text = execFileSync(path.join(binDir, binary), argv, {encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe']});
    } catch (e) {
      throw new Error(`cannot run ${path.join(binDir, binary)} ${argv.join(' ')}: ${e.message}`);
    }
    cache.set(key, parseHelp(text));
  }
  return cache.get(key);
}

// Checks `args` (the words after the program name) against the program's
// help. Returns {errors: [...], values: Map(flag -> value)}.
function checkArgs(binDir, binary, args, where) {
  const errors = [];
  const values = new Map();
  let spec;
  try {
    spec = helpOf(binDir, binary);
  } catch (e) {
    return {errors: [`${where}: ${e.message}`], values};
  }
  let sub = null;
  for (let i = 0; i < args.length; i++) {
    const arg = String(args[i]);
    if (arg.startsWith('--')) {
      const eq = arg.indexOf('=');
      const name = eq < 0 ? arg : arg.slice(0, eq);
      const opt = spec.options.get(name);
      if (!opt) {
        errors.push(`${where}: ${binary}${sub ? ' ' + sub : ''} has no option ${name} (see its --help)`);
        continue;
      }
      let value = true;
      if (opt.takesValue) {
        if (eq >= 0) value = arg.slice(eq + 1);
        else if (i + 1 < args.length) value = String(args[++i]);
        else {
          errors.push(`${where}: ${name} needs a value`);
          continue;
        }
        if (opt.integer) {
          if (!/^-?\d+$/.test(value)) errors.push(`${where}: ${name} takes an integer, not '${value}'`);
          else if (opt.min !== undefined && (Number(value) < opt.min || Number(value) > opt.max)) {
            errors.push(`${where}: ${name} ${value} is outside [${opt.min} - ${opt.max}]`);
          }
        }
      } else if (eq >= 0) {
        errors.push(`${where}: ${name} takes no value`);
      }
      values.set(name, value);
    } else if (!sub && spec.subcommands.has(arg)) {
      sub = arg;
      spec = helpOf(binDir, binary, sub);
      values.set('(subcommand)', sub);
    } else if (sub) {
      values.set('(positional)', arg);  // e.g. `ensemble-cli ready MODEL`
    } else {
      errors.push(`${where}: ${binary} takes no argument '${arg}' (not an option${spec.subcommands.size ? ' nor a subcommand' : ''})`);
    }
  }
  return {errors, values};
}

module.exports = {parseHelp, checkArgs};
