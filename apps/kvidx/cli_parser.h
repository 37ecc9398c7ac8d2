// Parses the kvidx command line (cli_command.h) with CLI11. NOTE: cli_parser.cpp is the only
// translation unit that includes CLI11's headers (~13 s of compile time each); keep it so.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "apps/kvidx/cli_command.h"

namespace kvidx::cli {

// Builds the CLI11 app declared by `root`, parses `args` (without the program name) and runs the
// callbacks of the commands given. nullopt when a command ran (its callback set its exit code);
// else the exit code parsing ended with, its message printed: 0 after --help or --version, 2 for a
// usage error, 1 for an exception out of a command ("kvidx: error: <what>", never a stack trace).
std::optional<int> parse_command_line(const Command& root, std::vector<std::string> args);

}  // namespace kvidx::cli
