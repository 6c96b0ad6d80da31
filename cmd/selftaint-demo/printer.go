package main

import (
	"fmt"
	"io"
	"time"
)

// indent lines up text under a timeline line's message.
const indent = "          "

// printer writes the timeline. While the drill runs a command, it holds
// the live view's lines back, so that the command and its output, stamped
// when it started, come first and the timeline stays in time order.
type printer struct {
	out   io.Writer
	start time.Time
	// holding says whether to hold lines back; held are those held.
	holding bool
	held    []string
}

// line is one timeline line, stamped now.
func (p *printer) line(format string, args ...any) string {
	return fmt.Sprintf("[%5.1fs] %s", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// say prints (or holds) one timeline line.
func (p *printer) say(format string, args ...any) {
	p.lines([]string{p.line(format, args...)})
}

// plain prints (or holds) a line without a stamp.
func (p *printer) plain(s string) {
	p.lines([]string{s})
}

// block prints (or holds) lines under the last one.
func (p *printer) block(ls []string) {
	for _, l := range ls {
		p.plain(indent + l)
	}
}

// lines prints (or holds) ready lines.
func (p *printer) lines(ls []string) {
	if p.holding {
		p.held = append(p.held, ls...)
		return
	}
	for _, l := range ls {
		fmt.Fprintln(p.out, l)
	}
}

// hold starts holding lines back.
func (p *printer) hold() { p.holding = true }

// release prints first, then the lines held back, and stops holding.
func (p *printer) release(first []string) {
	held := p.held
	p.holding, p.held = false, nil
	p.lines(first)
	p.lines(held)
}
