package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// report is one run's output: a header of facts, then sections of rows, each with its own
// columns, then notes. The control-plane comparison fills one section per size and mode;
// other measurements (data plane: rows of edgegate-vs-direct; boot: times per board) append
// sections of their own with whatever columns they need.
type report struct {
	Title   string
	Header  [][2]string // key, value
	Section []*section
	Notes   []string
}

// section is one table: rows under column titles; the first column holds the row names.
type section struct {
	Title   string
	Columns []string // titles of the value columns
	Rows    [][]string
	Notes   []string // printed under the table
}

// add appends a section and returns it for its rows.
func (r *report) add(title string, columns ...string) *section {
	s := &section{Title: title, Columns: columns}
	r.Section = append(r.Section, s)
	return s
}

// row appends a row: its name, then one cell per column (missing cells print empty).
func (s *section) row(name string, cells ...string) {
	s.Rows = append(s.Rows, append([]string{name}, cells...))
}

// String lays the report out as plain text, columns right-aligned under their titles.
func (r *report) String() string {
	var b strings.Builder
	fmt.Fprintln(&b, r.Title)
	kw := 0
	for _, kv := range r.Header {
		kw = max(kw, width(kv[0]))
	}
	for _, kv := range r.Header {
		fmt.Fprintf(&b, "%s:%s %s\n", kv[0], strings.Repeat(" ", kw-width(kv[0])), kv[1])
	}
	for _, s := range r.Section {
		b.WriteString("\n")
		s.write(&b)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "%s\n", n)
		}
	}
	return b.String()
}

func (s *section) write(b *strings.Builder) {
	fmt.Fprintln(b, s.Title)
	cols := len(s.Columns) + 1
	w := make([]int, cols)
	for i, c := range s.Columns {
		w[i+1] = width(c)
	}
	for _, r := range s.Rows {
		for i := 0; i < len(r) && i < cols; i++ {
			w[i] = max(w[i], width(r[i]))
		}
	}
	line := func(cells []string) {
		var l strings.Builder
		l.WriteString("  ")
		for i := range cols {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			if i == 0 {
				l.WriteString(c + strings.Repeat(" ", w[0]-width(c)))
				continue
			}
			l.WriteString("  " + strings.Repeat(" ", w[i]-width(c)) + c)
		}
		fmt.Fprintln(b, strings.TrimRight(l.String(), " "))
	}
	line(append([]string{""}, s.Columns...))
	for _, r := range s.Rows {
		line(r)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(b, "  %s\n", n)
	}
}

// width counts runes: the rows hold "×" and "→".
func width(s string) int { return utf8.RuneCountInString(s) }
