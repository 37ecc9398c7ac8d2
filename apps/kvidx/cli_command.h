// The kvidx command line as data: commands, their options, flags, defaults, checks, groups and
// callbacks, declared the way CLI11 would take them but without its headers. Only
// cli_parser.cpp includes CLI11 (~13 s of compile time per translation unit): it turns these
// declarations into a CLI11 app, in the order they were made, and parses (cli_parser.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace kvidx::cli {

// Where an option's value goes: the value types kvidx's flags use (std::size_t is std::uint64_t).
using OptionTarget =
    std::variant<bool*, int*, std::int64_t*, std::uint32_t*, std::uint64_t*, double*, std::string*,
                 std::vector<std::string>*, std::vector<std::uint64_t>*, std::optional<std::uint32_t>*>;

// Checks on a value: CLI11's Range, IsMember, PositiveNumber, ExistingFile. NOTE: InRange's type shows in --help
// ("UINT:INT in [1 - 256]" for a std::size_t option checked with InRange<int>).
template <class T>
struct InRange {
  T min;
  T max;
};
template <class T>
InRange(T, T) -> InRange<T>;  // NOTE: spelled out: clang 14 (clang-tidy) lacks C++20's aggregate deduction
struct IsMember {
  std::vector<std::string> values;
};
struct PositiveNumber {};
struct ExistingFile {};
using OptionCheck = std::variant<InRange<int>, InRange<unsigned>, InRange<std::uint64_t>, InRange<double>, IsMember,
                                 PositiveNumber, ExistingFile>;

// One option or flag. The setters mirror CLI11's and return the option for chaining.
struct Option {
  Option(std::string option_name, OptionTarget value_target, std::string text, bool is_flag)
      : name(std::move(option_name)), target(value_target), description(std::move(text)), flag(is_flag) {}

  std::string name;  // "--lanes"
  OptionTarget target;
  std::string description;
  bool flag;          // no value: `target` is a bool* set when given
  std::string group;  // title of its option group in --help; empty: the command's own options
  std::vector<OptionCheck> checks;
  bool show_default = false;  // --help shows the target's value before parsing
  bool is_required = false;
  std::optional<char> separator;              // one argument holds several values: "1,2,3"
  std::optional<std::pair<int, int>> arity;   // values per occurrence (0, 1): the value may be left out
  std::optional<std::string> shown_default;   // the default --help shows, given as text
  std::vector<std::string> needed, excluded;  // names of options this one needs / excludes

  Option& capture_default_str() {
    show_default = true;
    return *this;
  }
  Option& required() {
    is_required = true;
    return *this;
  }
  Option& check(OptionCheck value_check) {
    checks.push_back(std::move(value_check));
    return *this;
  }
  Option& delimiter(char value_separator) {
    separator = value_separator;
    return *this;
  }
  Option& expected(int min, int max) {
    arity = std::pair{min, max};
    return *this;
  }
  Option& default_str(std::string text) {
    shown_default = std::move(text);
    return *this;
  }
  // Given without `other`: a usage error. Resolved once every option of the command exists.
  Option& needs(std::string other) {
    needed.push_back(std::move(other));
    return *this;
  }
  // Not given together with `other` (both ways, as in CLI11).
  Option& excludes(std::string other) {
    excluded.push_back(std::move(other));
    return *this;
  }
};

// What a command's callback may ask of the parser once the command line is parsed.
class ParsedCommand {
 public:
  virtual ~ParsedCommand() = default;
  // Reads `path` (TOML or INI) as more flags of this command: keys are the long flags without
  // "--" ('_' may stand for '-'); flags given on the command line win. Unknown keys, `not_keys`,
  // sections and bad values are usage errors, thrown as the parser's (exit 2).
  virtual void apply_config_file(const std::string& path, const std::vector<std::string>& not_keys) const = 0;
};

class Command;

// Adds options to a command, listed under one title in --help (CLI11's option group).
class OptionGroup {
 public:
  OptionGroup(Command& command, std::string title) : command_(&command), title_(std::move(title)) {}
  template <class T>
  Option& add_option(std::string name, T& target, std::string description);
  Option& add_flag(std::string name, bool& target, std::string description);

 private:
  Command* command_;
  std::string title_;
};

class Command {
 public:
  using Callback = std::function<void(const ParsedCommand&)>;

  Command(std::string name, std::string description) : name_(std::move(name)), description_(std::move(description)) {}
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  // NOTE: as in CLI11, a subcommand starts with its parent's footer as it is now (a footer set
  // later is not inherited).
  Command& add_subcommand(std::string name, std::string description) {
    Command& sub = *subcommands_.emplace_back(std::make_unique<Command>(std::move(name), std::move(description)));
    sub.footer_ = footer_;
    return sub;
  }
  template <class T>
  Option& add_option(std::string name, T& target, std::string description) {
    return add(Option(std::move(name), OptionTarget(&target), std::move(description), /*is_flag=*/false));
  }
  Option& add_flag(std::string name, bool& target, std::string description) {
    return add(Option(std::move(name), OptionTarget(&target), std::move(description), /*is_flag=*/true));
  }
  OptionGroup add_option_group(std::string title) { return OptionGroup(*this, std::move(title)); }
  // The option named `name` (declared before); throws std::logic_error when there is none.
  Option& get_option(const std::string& name) {
    for (Option& option : options_) {
      if (option.name == name) return option;
    }
    throw std::logic_error("kvidx " + name_ + ": no option " + name);
  }

  void footer(std::string text) { footer_ = std::move(text); }
  void require_subcommand(int count) { required_subcommands_ = count; }
  // Runs after the command line is parsed, when this command was given.
  void callback(std::function<void()> run) {
    callback_ = [run = std::move(run)](const ParsedCommand&) { run(); };
  }
  void callback(Callback run) { callback_ = std::move(run); }
  // The root command only: --version's flag and text, and what runs once parsing is complete.
  void set_version_flag(std::string flag, std::string text) { version_ = std::pair{std::move(flag), std::move(text)}; }
  void parse_complete_callback(std::function<void()> run) { parse_complete_ = std::move(run); }

  // Read by the parser.
  const std::string& name() const { return name_; }
  const std::string& description() const { return description_; }
  const std::string& footer() const { return footer_; }
  int required_subcommands() const { return required_subcommands_; }
  const std::optional<std::pair<std::string, std::string>>& version() const { return version_; }
  const std::deque<Option>& options() const { return options_; }  // in declaration (and --help) order
  const std::vector<std::unique_ptr<Command>>& subcommands() const { return subcommands_; }
  const Callback& callback() const { return callback_; }
  const std::function<void()>& parse_complete() const { return parse_complete_; }

 private:
  friend class OptionGroup;
  Option& add(Option option) { return options_.emplace_back(std::move(option)); }

  std::string name_;
  std::string description_;
  std::string footer_;
  int required_subcommands_ = 0;
  std::optional<std::pair<std::string, std::string>> version_;
  std::deque<Option> options_;  // NOTE: a deque: the Option& handed out stay valid as options are added
  std::vector<std::unique_ptr<Command>> subcommands_;
  Callback callback_;
  std::function<void()> parse_complete_;
};

template <class T>
Option& OptionGroup::add_option(std::string name, T& target, std::string description) {
  Option& option = command_->add_option(std::move(name), target, std::move(description));
  option.group = title_;
  return option;
}

inline Option& OptionGroup::add_flag(std::string name, bool& target, std::string description) {
  Option& option = command_->add_flag(std::move(name), target, std::move(description));
  option.group = title_;
  return option;
}

}  // namespace kvidx::cli
