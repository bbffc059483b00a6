// Unknown-field check for Kubernetes objects, as `kubectl apply` does with
// its default --validate=strict: the published OpenAPI schemas (which
// kubernetes-models validates against) do not forbid extra properties, so a
// misspelt field (`readinesProbe:`) would pass them and be rejected, or
// silently dropped, by a real API server. The field names come from the
// models' own TypeScript declarations (.d.ts, generated from the same
// OpenAPI documents): a small parser for the subset of TypeScript types
// they use (object literals, Array<T>, index signatures, unions, imports).
'use strict';
const fs = require('fs');
const path = require('path');

function tokenize(text) {
  const src = text.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/\/\/[^\n]*/g, ' ');
  const tokens = [];
  const re = /\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|[{}<>()[\];:?|,.&=])/gy;
  let m;
  while ((m = re.exec(src)) !== null) tokens.push(m[1]);
  return tokens;
}

class TypeParser {
  constructor(tokens, pos) {
    this.t = tokens;
    this.i = pos;
  }
  peek() {
    return this.t[this.i];
  }
  next() {
    return this.t[this.i++];
  }
  expect(tok) {
    const got = this.next();
    if (got !== tok) throw new Error(`expected '${tok}', got '${got}'`);
  }
  type() {
    const options = [this.primary()];
    while (this.peek() === '|' || this.peek() === '&') {
      this.next();
      options.push(this.primary());
    }
    return options.length === 1 ? options[0] : {kind: 'union', options};
  }
  primary() {
    const tok = this.next();
    if (tok === '{') return this.members();
    if (tok === '(') {
      const inner = this.type();
      this.expect(')');
      return inner;
    }
    if (/^["'\d-]/.test(tok)) return {kind: 'leaf'};
    let name = tok;
    while (this.peek() === '.') {
      this.next();
      name += '.' + this.next();
    }
    let args = [];
    if (this.peek() === '<') {
      this.next();
      args.push(this.type());
      while (this.peek() === ',') {
        this.next();
        args.push(this.type());
      }
      this.expect('>');
    }
    while (this.peek() === '[') {  // IDeployment["kind"], T[]
      this.next();
      if (this.peek() !== ']') this.next();
      this.expect(']');
    }
    if (name === 'Array') return {kind: 'array', item: args[0]};
    if (/^(string|number|boolean|any|unknown|null|undefined|object|never)$/.test(name)) return {kind: 'leaf'};
    return {kind: 'ref', name};
  }
  // After '{': properties and index signatures up to the matching '}'.
  members() {
    const node = {kind: 'object', props: new Map(), index: null};
    while (this.peek() !== '}') {
      if (this.peek() === '[') {
        this.next();
        this.next();  // key
        this.expect(':');
        this.next();  // string
        this.expect(']');
        this.expect(':');
        node.index = this.type();
      } else {
        const name = this.next().replace(/^["']|["']$/g, '');
        if (this.peek() === '?') this.next();
        this.expect(':');
        node.props.set(name, this.type());
      }
      if (this.peek() === ';' || this.peek() === ',') this.next();
    }
    this.next();
    return node;
  }
}

const files = new Map();

// {imports: Map(name -> file), root: the first exported interface} of a .d.ts.
function loadDeclarations(file) {
  if (files.has(file)) return files.get(file);
  const text = fs.readFileSync(file, 'utf8');
  const imports = new Map();
  for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    const target = m[2].startsWith('.') ? path.resolve(path.dirname(file), m[2]) : path.join(nodeModules(file), m[2]);
    for (const part of m[1].split(',')) {
      const [orig, alias] = part.trim().split(/\s+as\s+/);
      if (orig) imports.set(alias || orig, `${target}.d.ts`);
    }
  }
  const tokens = tokenize(text);
  let root = null;
  for (let i = 0; i < tokens.length - 2; i++) {
    if (tokens[i] === 'export' && tokens[i + 1] === 'interface') {
      let j = i + 3;
      while (tokens[j] !== '{') j++;
      const parser = new TypeParser(tokens, j + 1);
      root = parser.members();
      break;
    }
  }
  const decl = {file, imports, root};
  files.set(file, decl);
  return decl;
}

function nodeModules(file) {
  const at = file.lastIndexOf(`${path.sep}node_modules${path.sep}`);
  return file.slice(0, at + '/node_modules'.length);
}

// Appends to `errors` every property of `value` that `type` does not declare.
function walk(value, type, decl, where, errors) {
  if (value === null || typeof value !== 'object' || !type) return;
  if (type.kind === 'ref') {
    const file = decl.imports.get(type.name);
    if (!file || !fs.existsSync(file)) return;  // a type alias (Quantity, IntOrString) or a base type
    const target = loadDeclarations(file);
    if (target.root) walk(value, target.root, target, where, errors);
  } else if (type.kind === 'array') {
    if (Array.isArray(value)) value.forEach((v, i) => walk(v, type.item, decl, `${where}[${i}]`, errors));
  } else if (type.kind === 'object' && !Array.isArray(value)) {
    for (const [key, v] of Object.entries(value)) {
      const prop = type.props.get(key);
      if (prop) walk(v, prop, decl, `${where}.${key}`, errors);
      else if (type.index) walk(v, type.index, decl, `${where}.${key}`, errors);
      else errors.push(`${where}: unknown field '${key}' (known: ${[...type.props.keys()].join(', ')})`);
    }
  }
}

// Checks `obj` against the model whose JavaScript module is `moduleFile`.
function unknownFields(obj, moduleFile) {
  const dts = moduleFile.replace(/\.(c|m)?js$/, '.d.ts');
  if (!fs.existsSync(dts)) return [`no type declarations at ${dts}`];
  const decl = loadDeclarations(dts);
  if (!decl.root) return [`no interface in ${dts}`];
  const errors = [];
  walk(obj, decl.root, decl, obj.kind, errors);
  return errors;
}

module.exports = {unknownFields};
