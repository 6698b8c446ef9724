// report.md -> report.html: the small markdown subset the report writer
// produces (headings, paragraphs, bullet lists, fenced code, pipe tables,
// `code` and **bold**), with every figure embedded inline as SVG so the page
// is one self-contained file.
#include <sstream>
#include <string>
#include <vector>

#include "report_figures.hpp"

namespace mantissa::report {

namespace {

std::string inline_md(const std::string& s) {
  std::string out;
  bool code = false, bold = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else if (!code && c == '*' && i + 1 < s.size() && s[i + 1] == '*') {
      out += bold ? "</strong>" : "<strong>";
      bold = !bold;
      ++i;
    } else if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  if (code) out += "</code>";
  if (bold) out += "</strong>";
  return out;
}

std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  for (size_t i = 1; i < line.size(); ++i) {  // skip the leading '|'
    if (line[i] == '|') {
      const size_t a = cur.find_first_not_of(' '), b = cur.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cur.substr(a, b - a + 1));
      cur.clear();
    } else cur += line[i];
  }
  return cells;
}

}  // namespace

std::string markdown_to_html(const std::string& md, const std::string& title,
                             const std::vector<std::pair<std::string, std::string>>& svgs) {
  std::istringstream in(md);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);

  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << inline_md(title)
    << "</title>\n<style>\n"
       "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\n"
       "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\n"
       "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}\nth{background:#f3f3f3}\n"
       "pre{background:#f6f6f6;padding:0.8em;overflow-x:auto}\ncode{background:#f6f6f6}\n"
       "figure{margin:1em 0}\nfigure svg{max-width:100%;height:auto}\n"
       "</style>\n</head>\n<body>\n";
  size_t i = 0;
  while (i < lines.size()) {
    const std::string& l = lines[i];
    if (l.empty()) {
      ++i;
    } else if (l.rfind("```", 0) == 0) {
      o << "<pre><code>";
      for (++i; i < lines.size() && lines[i].rfind("```", 0) != 0; ++i) o << inline_md(lines[i]) << "\n";
      o << "</code></pre>\n";
      ++i;
    } else if (l[0] == '#') {
      size_t level = l.find_first_not_of('#');
      if (level == std::string::npos || level > 6) level = 6;
      o << "<h" << level << ">" << inline_md(l.substr(std::min(l.size(), level + 1))) << "</h" << level << ">\n";
      ++i;
    } else if (l.rfind("![", 0) == 0) {
      const size_t close = l.find("](");
      const std::string alt = l.substr(2, close == std::string::npos ? 0 : close - 2);
      const std::string path = close == std::string::npos ? "" : l.substr(close + 2, l.size() - close - 3);
      std::string svg;
      for (const auto& [p, text] : svgs)
        if (p == path) svg = text;
      o << "<figure>" << (svg.empty() ? "<p>(figure missing: " + inline_md(path) + ")</p>" : svg)
        << "<figcaption>" << inline_md(alt) << "</figcaption></figure>\n";
      ++i;
    } else if (l[0] == '|') {
      o << "<table>\n";
      bool header = true;
      for (; i < lines.size() && !lines[i].empty() && lines[i][0] == '|'; ++i) {
        if (lines[i].rfind("|---", 0) == 0) continue;
        o << "<tr>";
        for (const auto& c : split_row(lines[i])) o << (header ? "<th>" : "<td>") << inline_md(c) << (header ? "</th>" : "</td>");
        o << "</tr>\n";
        header = false;
      }
      o << "</table>\n";
    } else if (l.rfind("- ", 0) == 0) {
      o << "<ul>\n";
      for (; i < lines.size() && lines[i].rfind("- ", 0) == 0; ++i) o << "<li>" << inline_md(lines[i].substr(2)) << "</li>\n";
      o << "</ul>\n";
    } else {
      o << "<p>";
      for (bool first = true; i < lines.size() && !lines[i].empty() && lines[i][0] != '|' && lines[i][0] != '#' &&
                              lines[i].rfind("```", 0) != 0 && lines[i].rfind("- ", 0) != 0 && lines[i].rfind("![", 0) != 0;
           ++i, first = false)
        o << (first ? "" : "\n") << inline_md(lines[i]);
      o << "</p>\n";
    }
  }
  o << "</body>\n</html>\n";
  return o.str();
}

}  // namespace mantissa::report
