// ParseCommandLine: how every ensemble-serve binary reads its flags (CLI11),
// so they all behave alike: --help prints the help and exits 0; a bad flag
// prints one line "<tool>: <what is wrong> (see --help)" and exits 2.
//
//   CLI::App app{"..."};  ...add options...
//   if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-train"))
//     return *exit_code;
//
// Header-only (CLI11 is), so es_base keeps no dependencies.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <optional>

namespace es {

// std::nullopt: parsed, go on; otherwise the code main() should return.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv, const char* tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", tool, e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace es
