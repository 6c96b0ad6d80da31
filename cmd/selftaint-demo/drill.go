package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// cue is one step of a script: once ready says so, the timeline tells
// what comes (header) and the drill runs one command, injecting fault,
// explaining a node, running another selftaint command (args) or showing
// something (show), while the live view goes on; or it starts follow, a
// selftaint command that runs a while, whose output the timeline shows
// line by line as it comes, and whose exit status the view records.
type cue struct {
	waitsFor string
	ready    func(v *view) bool
	header   string
	fault    *fault
	explain  string
	args     []string
	show     func(ctx context.Context) ([]string, error)
	follow   []string
}

// script is the drill's cues, in order: act 1 injects the first fault;
// act 2, once NoExecute is on the first node, the second (while the first
// holds the only grant), then, once the second asks, the third; then it
// explains the second node while both wait.
func (d *demo) script() []cue {
	f := d.cast.faults
	first, second, third := f[0].node, f[1].node, f[2].node
	return []cue{
		{
			waitsFor: "nothing",
			ready:    func(*view) bool { return true },
			header:   fmt.Sprintf("Act 1: a NoExecute fault on %s, lasting %s. Its agent publishes the condition; the rule puts the NoSchedule fallback on at once and asks the coordinator for a grant; NoExecute joins with the grant.", first, f[0].lasts),
			fault:    &f[0],
		},
		{
			waitsFor: "NoExecute on " + first,
			ready:    func(v *view) bool { return !v.nodes[first].noExecuteOn.IsZero() },
			header:   fmt.Sprintf("Act 2: the budget. %s holds the only grant (maxNoExecute: %d). The same fault on %s, for %s, and on %s, for %s:", first, budget, second, f[1].lasts, third, f[2].lasts),
			fault:    &f[1],
		},
		{
			waitsFor: second + " to ask for a grant",
			ready:    func(v *view) bool { return v.nodes[second].asks },
			fault:    &f[2],
		},
		{
			waitsFor: fmt.Sprintf("%s and %s to wait with the fallback", second, third),
			ready:    func(v *view) bool { return waiting(v.nodes[second]) && waiting(v.nodes[third]) },
			header:   fmt.Sprintf("%s and %s carry only the fallback and wait in line for %s's grant. What does explain say of %s?", second, third, first, second),
			explain:  second,
		},
	}
}

// waiting reports whether a node, as last seen, asks for a grant, holds
// none and has only the fallback on.
func waiting(st *nodeSeen) bool {
	return st.asks && !st.granted && !st.fallbackOn.IsZero() && st.cleared.IsZero() && st.noExecuteOn.IsZero()
}

// act runs c's command and returns the timeline's lines that show it.
func (d *demo) act(ctx context.Context, c cue) ([]string, error) {
	switch {
	case c.fault != nil:
		f := c.fault
		_, lines, err := d.selftaint(ctx, "fault", "inject", f.node, "--condition="+f.target, "--for="+f.lasts.String(),
			"--message="+f.message, "--config="+d.config)
		return lines, err
	case c.args != nil:
		_, lines, err := d.selftaint(ctx, c.args...)
		return lines, err
	case c.show != nil:
		return c.show(ctx)
	}
	_, lines, err := d.selftaint(ctx, "explain", c.explain, "--config="+d.config)
	return lines, err
}

// acted is a finished cue's command: the lines that show it, and a
// followed command's exit code.
type acted struct {
	lines []string
	code  int
	err   error
}

// stage is a script and when it is over: once every cue has run and over
// says so. stalled says what it still waits for when it takes longer
// than timeout.
type stage struct {
	cues    []cue
	over    func(v *view) bool
	stalled func(v *view) string
	timeout time.Duration
}

// drill runs the NoExecute drill until every fault has expired and
// cleared.
func (d *demo) drill(ctx context.Context, v *view) error {
	return d.play(ctx, v, stage{
		cues:    d.script(),
		over:    allCleared,
		stalled: faultStalled,
		timeout: d.cast.longest() + time.Minute,
	})
}

// player is where play is in a script: the next cue, the one running,
// and a followed command's output, line by line.
type player struct {
	next    int
	current cue
	running chan acted
	output  chan string
}

// play runs s's script, showing every 100ms what changed on the nodes and
// pods, until every cue has run and s is over.
func (d *demo) play(ctx context.Context, v *view, s stage) error {
	// On an error, show what the live view saw while the last command ran.
	defer func() {
		if d.log.holding {
			d.log.release(nil)
		}
	}()
	var p player
	deadline := time.Now().Add(s.timeout)
	for p.next < len(s.cues) || p.running != nil || !s.over(v) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the drill did not finish in time: %s", p.waitsFor(v, s))
		}
		if p.running == nil && p.next < len(s.cues) && s.cues[p.next].ready(v) {
			p.current = s.cues[p.next]
			p.running, p.output = d.start(ctx, v, p.current)
			p.next++
		}
		if err := d.observe(ctx, v); err != nil {
			return err
		}
		if err := d.await(ctx, v, &p); err != nil {
			return err
		}
	}
	return nil
}

// waitsFor says what a script that takes too long still waits for.
func (p *player) waitsFor(v *view, s stage) string {
	switch {
	case p.next < len(s.cues):
		return "waiting for " + s.cues[p.next].waitsFor
	case p.running != nil:
		return "a command still running"
	}
	return s.stalled(v)
}

// await waits up to 100ms for a line of the running command's output or
// for its end, and shows it.
func (d *demo) await(ctx context.Context, v *view, p *player) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case l, ok := <-p.output:
		if !ok {
			p.output = nil
			return nil
		}
		v.followedLine(d.log, l)
	case r := <-p.running:
		if p.output != nil {
			// A followed command has exited: its last lines are in the
			// pipe.
			for l := range p.output {
				v.followedLine(d.log, l)
			}
			p.output = nil
		}
		d.log.release(r.lines)
		p.running = nil
		if r.err != nil {
			return r.err
		}
		if f := p.current.follow; f != nil {
			d.log.say("selftaint %s exited with status %d", strings.Join(shownArgs(f), " "), r.code)
			v.followed(r.code)
		}
	case <-time.After(100 * time.Millisecond):
	}
	return nil
}

// start tells c's header and runs its command in the background, holding
// the live view's lines back until it is done; a followed command's
// output comes on the channel returned, line by line, as it comes.
func (d *demo) start(ctx context.Context, v *view, c cue) (chan acted, chan string) {
	if c.header != "" {
		d.log.plain("")
		d.log.say("%s", c.header)
	}
	if c.fault != nil {
		v.injected(*c.fault, time.Now())
	}
	done := make(chan acted, 1)
	if c.follow != nil {
		d.log.say("$ selftaint %s", strings.Join(shownArgs(c.follow), " "))
		output := make(chan string, 64)
		go func() {
			code, err := d.followCommand(ctx, output, c.follow...)
			done <- acted{code: code, err: err}
		}()
		return done, output
	}
	d.log.hold()
	go func() {
		lines, err := d.act(ctx, c)
		done <- acted{lines: lines, err: err}
	}()
	return done, nil
}

// allCleared reports whether every node's fault has been injected and has
// cleared.
func allCleared(v *view) bool {
	for _, st := range v.nodes {
		if st.injected.IsZero() || st.cleared.IsZero() {
			return false
		}
	}
	return true
}

// faultStalled says which fault the drill still waits for.
func faultStalled(v *view) string {
	for _, name := range sortedNodes(v) {
		if st := v.nodes[name]; st.cleared.IsZero() {
			return fmt.Sprintf("%s's fault (%s) has not cleared", name, st.fault.lasts)
		}
	}
	return "nothing"
}
