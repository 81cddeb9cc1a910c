// One way out for untrusted text (compiler diagnostics, #line file names, model answers,
// submission file and kernel names) to a terminal, a Markdown file or a CSV cell. The HTML and
// JUnit writers escape on their own (report/html.cpp, report.cpp's xml_escape).
#pragma once

#include <string>
#include <string_view>

namespace kharness {

// Several lines as they are, newlines and tabs kept; every other control character (C0, DEL, the
// C1 controls such as CSI, the bidirectional overrides and isolates) made visible as \xHH, so that
// no escape sequence reaches a terminal (an OSC 52 writing the clipboard of whoever runs
// `kharness compile` on a pull request) or a rendered file. printable_line (kharness/text.hpp) is
// the one-line form.
std::string printable_text(std::string_view text);

// A CSV cell that a spreadsheet shows and never runs: printable_line, and a cell that starts with
// = + - @, a tab or a carriage return gets a ' in front (a plain number such as -1.5 stays).
std::string spreadsheet_safe(std::string_view text);

}  // namespace kharness
