// Each kvidx subcommand lives in its own .cpp and declares itself on the root command (cli_command.h).
// A subcommand's callback stores its exit code in `exit_code` (see exit_codes.h).
#pragma once

namespace kvidx::cli {

class Command;

void add_serve_command(Command& app, int& exit_code);
void add_replay_command(Command& app, int& exit_code);
void add_capture_command(Command& app, int& exit_code);
void add_dump_command(Command& app, int& exit_code);
void add_score_command(Command& app, int& exit_code);
void add_stats_command(Command& app, int& exit_code);
void add_publish_command(Command& app, int& exit_code);
void add_bridge_command(Command& app, int& exit_code);
void add_workers_command(Command& app, int& exit_code);  // workers and remove-worker
void add_nkey_command(Command& app, int& exit_code);

}  // namespace kvidx::cli
