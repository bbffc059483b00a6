// ParseCommandLine: how every ensemble-serve binary reads its flags (CLI11),
// so they all behave alike: --help prints the help and exits 0; a bad flag
// prints one line "<tool>: <what is wrong> (see --help)" and exits 2, naming
// an unknown option or subcommand when there is one ("unknown option
// '--bogus'", "unknown subcommand 'bogus'").
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

// What is wrong with the first argument `app` does not know, or "": an
// option (-x, --name, --name=value) that is none of the app's (nor, after a
// subcommand, the subcommand's) gives "unknown option '--name'"; with
// subcommands, a first word that names none gives "unknown subcommand
// 'word'". An option's value is skipped (a negative number is a value, not
// an option).
inline std::string FirstUnknownArgument(CLI::App& app, int argc, char** argv) {
  const bool has_subcommands = !app.get_subcommands([](CLI::App*) { return true; }).empty();
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    const bool option = arg.size() >= 2 && arg[0] == '-' && !(arg[1] >= '0' && arg[1] <= '9') && arg[1] != '.';
    if (option) {
      const std::string name = arg.substr(0, arg.find('='));
      CLI::Option* known = current->get_option_no_throw(name);
      if (known == nullptr && current != &app) known = app.get_option_no_throw(name);  // fallthrough
      if (known == nullptr) return "unknown option '" + name + "'";
      if (arg.find('=') == std::string::npos && known->get_expected_min() > 0) ++i;  // its value
      continue;
    }
    if (has_subcommands && current == &app) {
      CLI::App* sub = nullptr;
      for (CLI::App* candidate : app.get_subcommands([](CLI::App*) { return true; })) {
        if (candidate->check_name(arg)) sub = candidate;
      }
      if (sub == nullptr) return "unknown subcommand '" + arg + "'";
      current = sub;
    }
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
    if (const std::string unknown = FirstUnknownArgument(app, argc, argv); !unknown.empty()) {
      std::fprintf(stderr, "%s: %s (see --help)\n", tool, unknown.c_str());
    } else {
      std::fprintf(stderr, "%s: %s (see --help)\n", tool, e.what());
    }
    return 2;
  }
  return std::nullopt;
}

}  // namespace es
