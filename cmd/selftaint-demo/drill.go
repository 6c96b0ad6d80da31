package main

import (
	"context"
	"fmt"
	"time"
)

// cue is one step of the drill's script: once ready says so, the
// timeline tells what comes (header) and the drill runs one command,
// injecting fault or explaining a node, while the live view goes on.
type cue struct {
	waitsFor string // what ready waits for, for the error when it never comes
	ready    func(v *view) bool
	header   string
	fault    *fault
	explain  string
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
	if c.fault != nil {
		f := c.fault
		_, lines, err := d.selftaint(ctx, "fault", "inject", f.node, "--condition=memory", "--for="+f.lasts.String(),
			"--message=demo: the node ran out of memory", "--config="+d.config)
		return lines, err
	}
	_, lines, err := d.selftaint(ctx, "explain", c.explain, "--config="+d.config)
	return lines, err
}

// acted is a finished cue's command.
type acted struct {
	lines []string
	err   error
}

// drill runs the script, showing every 100ms what changed on the nodes and
// pods, until every cue has run and every fault has expired and cleared.
func (d *demo) drill(ctx context.Context) (*view, error) {
	// On an error, show what the live view saw while the last command ran.
	defer func() {
		if d.log.holding {
			d.log.release(nil)
		}
	}()
	v := newView(d.cast)
	cues := d.script()
	next := 0
	var running chan acted
	deadline := time.Now().Add(d.cast.longest() + time.Minute)
	for next < len(cues) || running != nil || !allCleared(v) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the drill did not finish in time: %s", stalled(v, cues, next))
		}
		if running == nil && next < len(cues) && cues[next].ready(v) {
			running = d.start(ctx, v, cues[next])
			next++
		}
		if err := d.observe(ctx, v); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r := <-running:
			d.log.release(r.lines)
			if r.err != nil {
				return nil, r.err
			}
			running = nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	return v, nil
}

// start tells c's header and runs its command in the background, holding
// the live view's lines back until it is done.
func (d *demo) start(ctx context.Context, v *view, c cue) chan acted {
	if c.header != "" {
		d.log.plain("")
		d.log.say("%s", c.header)
	}
	if c.fault != nil {
		v.injected(*c.fault, time.Now())
	}
	d.log.hold()
	done := make(chan acted, 1)
	go func() {
		lines, err := d.act(ctx, c)
		done <- acted{lines, err}
	}()
	return done
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

// stalled says what the drill still waits for.
func stalled(v *view, cues []cue, next int) string {
	if next < len(cues) {
		return "waiting for " + cues[next].waitsFor
	}
	for _, name := range sortedNodes(v) {
		if st := v.nodes[name]; st.cleared.IsZero() {
			return fmt.Sprintf("%s's fault (%s) has not cleared", name, st.fault.lasts)
		}
	}
	return "a command still running"
}
