// Each kvidx subcommand lives in its own .cpp and registers itself on the root CLI11 app.
// A subcommand's callback stores its exit code in `exit_code` (see exit_codes.h).
#pragma once

namespace CLI {
class App;
}

namespace kvidx::cli {

void add_serve_command(CLI::App& app, int& exit_code);
void add_replay_command(CLI::App& app, int& exit_code);
void add_capture_command(CLI::App& app, int& exit_code);
void add_dump_command(CLI::App& app, int& exit_code);
void add_score_command(CLI::App& app, int& exit_code);
void add_stats_command(CLI::App& app, int& exit_code);
void add_publish_command(CLI::App& app, int& exit_code);
void add_bridge_command(CLI::App& app, int& exit_code);
void add_workers_command(CLI::App& app, int& exit_code);  // workers and remove-worker
void add_nkey_command(CLI::App& app, int& exit_code);

}  // namespace kvidx::cli
