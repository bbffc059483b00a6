// Early returns on errors, for any status-like type: the project's
// es::Status / es::StatusOr and the client library's es::client::Status /
// Result (each has ok(); a value holder also has status() and value()).
//
// Contract: ES_RETURN_IF_ERROR(expr) evaluates `expr` (a status) once and
// returns it from the enclosing function if it is an error.
// ES_ASSIGN_OR_RETURN(lhs, expr) evaluates `expr` (a value holder) once;
// returns its status from the enclosing function if it is an error, else
// moves its value into `lhs` (a declaration such as `auto x`, or an
// existing variable or member). The enclosing function's return type must be
// constructible from that status. Both expand to statements, not
// expressions; ES_ASSIGN_OR_RETURN declares a hidden variable named after
// the line, so use it at most once per line. The expression may hold commas
// (template arguments); `lhs` may not (write `auto x` for such a type).
#pragma once

#include <utility>

#define ES_RETURN_IF_ERROR(...)             \
  do {                                      \
    auto es_status_ = (__VA_ARGS__);        \
    if (!es_status_.ok()) return es_status_; \
  } while (0)

#define ES_STATUS_CONCAT_INNER(a, b) a##b
#define ES_STATUS_CONCAT(a, b) ES_STATUS_CONCAT_INNER(a, b)

#define ES_ASSIGN_OR_RETURN(lhs, ...) \
  ES_ASSIGN_OR_RETURN_IMPL(ES_STATUS_CONCAT(es_status_or_, __LINE__), lhs, __VA_ARGS__)
#define ES_ASSIGN_OR_RETURN_IMPL(tmp, lhs, ...) \
  auto tmp = (__VA_ARGS__);                     \
  if (!tmp.ok()) return tmp.status();           \
  lhs = std::move(tmp).value()
