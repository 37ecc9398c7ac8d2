// The one translation unit that includes CLI11: the declarations of cli_command.h become CLI11
// calls, in the order they were declared (so --help, parse errors and exit codes are CLI11's own).
#include "apps/kvidx/cli_parser.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <type_traits>

#include "apps/kvidx/exit_codes.h"

namespace kvidx::cli {
namespace {

CLI::Validator validator_for(const OptionCheck& check) {
  return std::visit(
      [](const auto& c) -> CLI::Validator {
        using Check = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<Check, IsMember>)
          return CLI::IsMember(c.values);
        else if constexpr (std::is_same_v<Check, PositiveNumber>)
          return CLI::PositiveNumber;
        else if constexpr (std::is_same_v<Check, ExistingFile>)
          return CLI::ExistingFile;
        else
          return CLI::Range(c.min, c.max);
      },
      check);
}

CLI::Option* add_option(CLI::App& app, const Option& option) {
  return std::visit(
      [&](auto* target) -> CLI::Option* {
        if constexpr (std::is_same_v<decltype(target), bool*>) {
          if (option.flag) return app.add_flag(option.name, *target, option.description);
        }
        return app.add_option(option.name, *target, option.description);
      },
      option.target);
}

void apply_modifiers(CLI::Option& opt, const Option& option) {
  for (const OptionCheck& check : option.checks) opt.check(validator_for(check));
  if (option.show_default) opt.capture_default_str();
  if (option.is_required) opt.required();
  if (option.separator) opt.delimiter(*option.separator);
  if (option.arity) opt.expected(option.arity->first, option.arity->second);
  if (option.shown_default) opt.default_str(*option.shown_default);
}

CLI::Option& find_option(CLI::App& app, const std::string& name) {
  CLI::Option* opt = app.get_option_no_throw(name);  // NOTE: searches the option groups too
  if (opt == nullptr) throw std::logic_error("kvidx " + app.get_name() + ": no option " + name);
  return *opt;
}

// A parsed command as its callback sees it.
class Cli11Command final : public ParsedCommand {
 public:
  explicit Cli11Command(CLI::App& app) : app_(app) {}

  // NOTE: not CLI11's set_config: CLI11 2.1 (Debian 12) only reads the config of the root app, so a
  // subcommand's config file was silently ignored.
  void apply_config_file(const std::string& path, const std::vector<std::string>& not_keys) const override {
    std::vector<CLI::ConfigItem> items;
    try {
      items = CLI::ConfigTOML().from_file(path);
    } catch (const CLI::FileError&) {
      throw CLI::FileError::Missing(path);
    }
    for (const CLI::ConfigItem& item : items) {
      if (item.name == "++" || item.name == "--") continue;  // section markers
      if (!item.parents.empty()) throw CLI::ConfigError("unexpected section in " + path + ": " + item.fullname());
      std::string name = item.name;
      std::replace(name.begin(), name.end(), '_', '-');
      CLI::Option* opt = app_.get_option_no_throw("--" + name);
      if (opt == nullptr || std::find(not_keys.begin(), not_keys.end(), name) != not_keys.end()) {
        throw CLI::ConfigError("unknown key '" + item.name + "' in " + path);
      }
      if (opt->count() > 0) continue;  // the command line wins
      opt->add_result(item.inputs);
      opt->run_callback();  // validates (ranges) and stores the value
    }
  }

 private:
  CLI::App& app_;
};

// `app` gets what `command` declares, in the order CLI11 would have been called directly.
void configure(CLI::App& app, const Command& command) {
  app.footer(command.footer());  // NOTE: replaces the footer CLI11 copied from the parent app
  if (command.required_subcommands() > 0) app.require_subcommand(command.required_subcommands());
  if (command.version()) app.set_version_flag(command.version()->first, command.version()->second);
  // NOTE: a group is created where its first option is declared, as a direct CLI11 call would.
  std::map<std::string, CLI::Option_group*> groups;
  for (const Option& option : command.options()) {
    CLI::App* owner = &app;
    if (!option.group.empty()) {
      auto [it, created] = groups.try_emplace(option.group, nullptr);
      if (created) it->second = app.add_option_group(option.group);
      owner = it->second;
    }
    apply_modifiers(*add_option(*owner, option), option);
  }
  // Relations once every option exists: CLI11 checks them in option order whenever they were added.
  for (const Option& option : command.options()) {
    CLI::Option& opt = find_option(app, option.name);
    for (const std::string& name : option.needed) opt.needs(&find_option(app, name));
    for (const std::string& name : option.excluded) opt.excludes(&find_option(app, name));
  }
  for (const auto& subcommand : command.subcommands()) {
    configure(*app.add_subcommand(subcommand->name(), subcommand->description()), *subcommand);
  }
  if (const Command::Callback& run = command.callback()) {
    app.callback([&app, &run] { run(Cli11Command(app)); });
  }
  if (command.parse_complete()) app.parse_complete_callback(command.parse_complete());
}

}  // namespace

std::optional<int> parse_command_line(const Command& root, std::vector<std::string> args) {
  CLI::App app{root.description(), root.name()};
  configure(app, root);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  } catch (const std::exception& e) {
    // NOTE: the contract is one clear line, never a stack trace.
    std::fprintf(stderr, "kvidx: error: %s\n", e.what());
    return kExitFailure;
  }
  return std::nullopt;
}

}  // namespace kvidx::cli
