// kvidx score: ask a running kvidx for the overlap scores of one block sequence and print the
// reply (the JSON of schemas/score-query-reply.schema.json) on stdout.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/live_client.h"
#include "libcodec/query_codec.h"
#include "replay/event_log_reader.h"

namespace kvidx::cli {
namespace {

struct ScoreFlags {
  LiveFlags live;
  std::vector<std::uint64_t> hashes;
  std::string tokens_file;
  std::uint32_t block_size = 0;
  std::string lora_name;
  bool eagle = false;
  bool early_exit = false;
  std::uint32_t shards = 0;  // > 0: ask the shards directly and merge here (no front)
};

// Token ids from a file: a JSON array, or numbers separated by whitespace or commas.
bool read_tokens(const std::string& path, std::vector<std::uint32_t>& tokens, std::string& error) {
  if (error = check_input_file(path); !error.empty()) return false;
  std::ifstream in(path);
  if (!in) {
    error = path + ": cannot open";
    return false;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  for (char& c : text) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream numbers(text);
  std::string word;
  while (numbers >> word) {
    try {
      std::size_t used = 0;
      const unsigned long long value = std::stoull(word, &used);
      if (used != word.size() || value > 0xFFFFFFFFull) throw std::out_of_range(word);
      tokens.push_back(static_cast<std::uint32_t>(value));
    } catch (const std::exception&) {
      error = fmt::format("{}: '{}' is not a u32 token id", path, word);
      return false;
    }
  }
  return true;
}

int run_score(const ScoreFlags& flags) {
  std::string request;
  if (!flags.tokens_file.empty()) {
    std::vector<std::uint32_t> tokens;
    std::string error;
    if (!read_tokens(flags.tokens_file, tokens, error)) {
      std::fprintf(stderr, "kvidx score: %s\n", error.c_str());
      return kExitFailure;  // like every missing or unreadable input file
    }
    request = encode_token_score_request(tokens, flags.block_size, flags.lora_name, flags.eagle, flags.early_exit);
  } else {
    ScoreRequest hashes{{}, flags.early_exit};
    for (const std::uint64_t h : flags.hashes) hashes.local_hashes.push_back(LocalBlockHash{h});
    request = encode_score_request(hashes);
  }
  int exit_code = kExitOk;
  auto client = LiveClient::connect(flags.live, "score", exit_code);
  if (!client) return exit_code;
  // NOTE: a score query is read-only, so retrying one that a replica lost (killed mid-request) is
  // safe: during a failover the survivor answers the retry.
  auto reply = flags.shards > 0 ? client->scatter_scores(request, flags.shards, exit_code)
                                : client->request_retrying(client->subjects().query_scores(), request, exit_code);
  if (!reply) return exit_code;
  std::cout << *reply << '\n';
  return decode_error_reply(*reply) ? kExitFailure : kExitOk;
}

}  // namespace

void add_score_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<ScoreFlags>();
  Command& cmd = app.add_subcommand("score", "Ask a running kvidx for overlap scores of a block sequence");
  add_live_flags(cmd, flags->live);
  add_retries_flag(cmd, flags->live);
  Option& hashes = cmd.add_option("--hashes", flags->hashes, "Local block hashes, comma separated").delimiter(',');
  Option& tokens =
      cmd.add_option("--tokens-file", flags->tokens_file, "Token ids (JSON array or whitespace separated)");
  cmd.add_option("--block-size", flags->block_size, "Tokens per block (with --tokens-file)")
      .check(InRange{1u, 1u << 20});
  cmd.add_option("--lora-name", flags->lora_name, "LoRA adapter name salting the block hashes (with --tokens-file)");
  Option& eagle = cmd.add_flag("--eagle", flags->eagle,
                               "Eagle block hashing: windows of block size + 1 tokens (with --tokens-file)");
  eagle.needs("--tokens-file");
  cmd.add_flag("--early-exit", flags->early_exit, "Stop matching once a single worker remains");
  cmd.add_option("--shards", flags->shards,
                 "Ask the N shards of a sharded deployment directly (<prefix>.shard.I.query.scores) and merge their "
                 "replies here; without it a sharded deployment's front answers kv.query.scores")
      .check(InRange{1u, 1024u});
  hashes.excludes("--tokens-file");
  tokens.needs("--block-size");
  cmd.footer(
      "Examples: kvidx score --nats nats://127.0.0.1:4222 --hashes 1,2,3\n"
      "          kvidx score --nats nats://127.0.0.1:4222 --tokens-file prompt.json --block-size 16");
  cmd.callback([flags, &exit_code] {
    if (flags->hashes.empty() && flags->tokens_file.empty()) {
      std::fprintf(stderr, "kvidx score: give --hashes or --tokens-file with --block-size\n");
      exit_code = kExitUsage;
      return;
    }
    exit_code = run_score(*flags);
  });
}

}  // namespace kvidx::cli
