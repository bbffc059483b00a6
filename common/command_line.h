// ParseCommandLine: how every ensemble-serve binary reads its flags (CLI11),
// so they all behave alike: --help prints the help and exits 0; a bad flag
// prints one line "<tool>: <what is wrong> (see --help)" and exits 2, naming
// an unknown option when there is one ("unknown option '--bogus'").
//
//   CLI::App app{"..."};  ...add options...
//   if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-train"))
//     return *exit_code;
//
// Header-only (CLI11 is), so es_common keeps no dependencies.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

namespace es {

// The first argument that looks like an option (-x, --name, --name=value)
// and is none of `app`'s, or "". Only for apps without subcommands (whose
// options live in the subcommands); a negative number is a value, not an
// option.
inline std::string FirstUnknownOption(CLI::App& app, int argc, char** argv) {
  if (!app.get_subcommands([](CLI::App*) { return true; }).empty()) return "";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9') || arg[1] == '.') continue;
    const std::string name = arg.substr(0, arg.find('='));
    if (app.get_option_no_throw(name) == nullptr) return name;
  }
  return "";
}

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
    // CLI11 reports a missing required option before an unknown one; the
    // unknown one is the user's actual mistake, so it is named first.
    if (const std::string unknown = FirstUnknownOption(app, argc, argv); !unknown.empty()) {
      std::fprintf(stderr, "%s: unknown option '%s' (see --help)\n", tool, unknown.c_str());
    } else {
      std::fprintf(stderr, "%s: %s (see --help)\n", tool, e.what());
    }
    return 2;
  }
  return std::nullopt;
}

}  // namespace es
