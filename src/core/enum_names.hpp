// The names of the enums of kharness/timing.hpp, one table per enum: name_of and parse_enum read
// them, and so do the command line's options (cli/common.hpp's add_enum_option), whose allowed
// values and error messages list them. A new value is named here once.
#pragma once

#include <string_view>
#include <utility>

#include "kharness/timing.hpp"

namespace kharness {

template <class E>
struct EnumNames;

template <>
struct EnumNames<Protocol> {
  static constexpr std::pair<Protocol, std::string_view> kTable[] = {
      {Protocol::kAdaptive, "adaptive"}, {Protocol::kOfficial, "official"}};
};
template <>
struct EnumNames<Timer> {
  static constexpr std::pair<Timer, std::string_view> kTable[] = {{Timer::kCupti, "cupti"},
                                                                  {Timer::kEvents, "events"}};
};
template <>
struct EnumNames<SolSource> {
  static constexpr std::pair<SolSource, std::string_view> kTable[] = {
      {SolSource::kDatasheet, "datasheet"}, {SolSource::kMeasured, "measured"}};
};
template <>
struct EnumNames<StateReset> {
  static constexpr std::pair<StateReset, std::string_view> kTable[] = {
      {StateReset::kAuto, "auto"}, {StateReset::kReload, "reload"}};
};
template <>
struct EnumNames<Mode> {
  static constexpr std::pair<Mode, std::string_view> kTable[] = {{Mode::kCompile, "compile"},
                                                                 {Mode::kCheck, "check"},
                                                                 {Mode::kBench, "bench"},
                                                                 {Mode::kValidate, "validate"}};
};
template <>
struct EnumNames<StopReason> {
  static constexpr std::pair<StopReason, std::string_view> kTable[] = {
      {StopReason::kNotFinished, "not_finished"},
      {StopReason::kNoiseMet, "noise_met"},
      {StopReason::kTimeLimit, "time_limit"},
      {StopReason::kSampleCount, "sample_count"}};
};

// Every value of E with its name, in the order the table lists them.
template <class E>
constexpr const auto& enum_names() {
  return EnumNames<E>::kTable;
}

}  // namespace kharness
