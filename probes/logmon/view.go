package logmon

// View is what a Monitor has read and matched so far, for humans
// (selftaint check).
type View struct {
	// Config is the NPD file, Source its "source" and Plugin its plugin.
	Config, Source, Plugin string
	// Log is the log read.
	Log string
	// Started says the source has begun (the boot is read); LinesRead
	// counts the lines read since.
	Started   bool
	LinesRead uint64
	// Err is why the log or the boot cannot be read; "" while they can.
	Err string
	// Conditions are the file's conditions, in file order.
	Conditions []ConditionState
	// Recent are the last matches of every rule, permanent and
	// temporary, oldest first.
	Recent []Match
}

// Monitor is the monitor the probe is one of: its file's probes share it.
func (p *Probe) Monitor() *Monitor { return p.mon }

// View says what the monitor has read and matched so far. It starts
// nothing: a probe's first Probe or Watch starts the source.
func (mon *Monitor) View() View {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	v := View{Config: mon.cfg.Path, Source: mon.cfg.Source, Plugin: mon.cfg.Plugin, Log: mon.path,
		Started: mon.bootRead, LinesRead: mon.lines}
	switch {
	case mon.bootErr != nil:
		v.Err = mon.bootErr.Error()
	case mon.srcErr != nil:
		v.Err = mon.srcErr.Error()
	}
	if mon.m != nil {
		v.Conditions, v.Recent = mon.m.Conditions(), mon.m.Recent()
	}
	return v
}
