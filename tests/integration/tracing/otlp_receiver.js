#!/usr/bin/env node
// An OTLP/HTTP trace receiver for the tests: the export decoded by the
// OpenTelemetry project's own protobuf code (@opentelemetry/otlp-transformer's
// generated opentelemetry.proto root, pinned in package-lock.json), not by
// ours.
//
//   node otlp_receiver.js --out FILE [--delay-ms N] [--status CODE]
//
// Listens on 127.0.0.1 (a free port), prints "otlp listening on
// 127.0.0.1:PORT", and for each POST /v1/traces appends one JSON line to
// FILE: {"content_type": ..., "resource_spans": [...]} with ids as lower-case
// hex and times as decimal strings, or {"error": "..."} when the body does not
// decode. Answers an empty ExportTraceServiceResponse (200), or CODE, after
// N ms. Runs until killed.
"use strict";
const fs = require("fs");
const http = require("http");
const root = require("@opentelemetry/otlp-transformer/build/src/generated/root");

const trace = root.opentelemetry.proto.collector.trace.v1;

function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const out = option("--out", null);
const delayMs = Number(option("--delay-ms", "0"));
const status = Number(option("--status", "200"));
if (!out) {
  console.error("usage: otlp_receiver.js --out FILE [--delay-ms N] [--status CODE]");
  process.exit(2);
}

const hex = (bytes) => Buffer.from(bytes || []).toString("hex");
const text = (value) => (value === undefined || value === null ? undefined : String(value));

// The decoded message as plain JSON: AnyValue as its one set field.
function plainValue(v) {
  if (!v) return null;
  for (const key of ["stringValue", "boolValue", "intValue", "doubleValue"]) {
    if (v[key] !== undefined && v[key] !== null) return key === "intValue" ? String(v[key]) : v[key];
  }
  return null;
}
function attributes(list) {
  const o = {};
  for (const kv of list || []) o[kv.key] = plainValue(kv.value);
  return o;
}
function plain(request) {
  return (request.resourceSpans || []).map((rs) => ({
    resource: attributes(rs.resource && rs.resource.attributes),
    scopes: (rs.scopeSpans || []).map((ss) => ({
      scope: ss.scope ? ss.scope.name : "",
      spans: (ss.spans || []).map((s) => ({
        trace_id: hex(s.traceId),
        span_id: hex(s.spanId),
        parent_span_id: hex(s.parentSpanId),
        trace_state: s.traceState || "",
        name: s.name,
        kind: s.kind,
        start: text(s.startTimeUnixNano),
        end: text(s.endTimeUnixNano),
        attributes: attributes(s.attributes),
      })),
    })),
  }));
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    let line;
    if (req.method !== "POST" || req.url !== "/v1/traces") {
      line = { error: `unexpected ${req.method} ${req.url}` };
    } else {
      try {
        line = { content_type: req.headers["content-type"], resource_spans: plain(trace.ExportTraceServiceRequest.decode(body)) };
      } catch (e) {
        line = { error: `undecodable body (${body.length} bytes): ${e.message}` };
      }
    }
    fs.appendFileSync(out, JSON.stringify(line) + "\n");
    setTimeout(() => {
      const answer = Buffer.from(trace.ExportTraceServiceResponse.encode({}).finish());
      res.writeHead(line.error ? 400 : status, { "Content-Type": "application/x-protobuf" });
      res.end(answer);
    }, delayMs);
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(`otlp listening on 127.0.0.1:${server.address().port}`);
});
