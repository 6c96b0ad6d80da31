package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"

	"golang.org/x/sys/unix"
)

// BenchmarkPSIPressureToCondition: real memory pressure (page-cache
// thrashing in a 64 MiB memory cgroup, probestest.Thrash) to the memory
// condition True on a Node watch, for the memory probe's stall rule
// (psi.some: 100ms within the window: 1s with CAP_SYS_RESOURCE, else 2s,
// the least the kernel allows without it) against the avg10 rule it
// replaces (psiSomeAvg10Above: 10), each an in-process agent with for: 0s
// and clearAfter: 0s on its own Node of one control plane. The pressure's
// moment is when the stall within the trailing window first reaches the
// rule's stall: the benchmark reads /proc/pressure/memory's "some total="
// every 250ms and interpolates (see psiSampler for why not every 10ms).
// Beside each row: when the benchmark's own trigger, the same as the
// rule's, fired (the kernel's part), and from that fire to the condition
// (the agent's part). The rule's `for` adds to these figures as it is (damping;
// default 30s). PSI_EPISODES (default 20) and PSI_AVG_EPISODES (default
// 5: each waits for avg10 to decay, ~40s) set the counts; about 4 minutes.
//
//	make psi-bench   (or KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench PSIPressureToCondition -benchtime 1x ./agent/)
func BenchmarkPSIPressureToCondition(b *testing.B) {
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		probestest.FailOrSkip(b, fmt.Sprintf("the kernel has no memory PSI (CONFIG_PSI): %v", err))
	}
	th := probestest.NewThrash(b, 64<<20, 96<<20)
	cp := shared.Get(b)
	c := cp.Client()
	window := 2 * time.Second
	if hasCapSysResource() {
		window = time.Second
	}
	const stall = 100 * time.Millisecond
	s := newPSISampler(b, window)
	kernel := newKernelTrigger(b, fmt.Sprintf("some %d %d", stall.Microseconds(), window.Microseconds()))
	rows := []struct {
		name, key, node, memory string
		episodes                int
		// quiet: the pressure file is calm enough for the next episode.
		quiet func(psiNow) bool
	}{
		{fmt.Sprintf("stall rule some %v/%v", stall, window), "stall", "psi-stall",
			fmt.Sprintf("psi: {some: {stall: %v, window: %v}, full: {stall: 0s}}", stall, window),
			latencyEvents(b, "PSI_EPISODES", 20), func(p psiNow) bool { return p.trailing < stall/10 }},
		{"avg10 rule some > 10%", "avg10", "psi-avg10",
			"psiSomeAvg10Above: 10\n    psi: {full: {stall: 0s}}",
			latencyEvents(b, "PSI_AVG_EPISODES", 5), func(p psiNow) bool { return p.trailing < stall/10 && p.avg10 < 1 }},
	}
	var results []latencyResult
	for _, row := range rows {
		cp.CreateNode(b, row.node, nil)
		runPSIAgent(b, c, row.node, row.memory)
		nw := newNodeWatcher(b, c, row.node)
		isTrue := func(n *corev1.Node) bool {
			cd := condition(n, config.DefaultMemoryCondition)
			return cd != nil && cd.Status == corev1.ConditionTrue
		}
		nw.until(time.Minute, "the memory condition False", func(n *corev1.Node) bool {
			cd := condition(n, config.DefaultMemoryCondition)
			return cd != nil && cd.Status == corev1.ConditionFalse
		})
		res := latencyResult{name: row.name + " (crossing)", key: row.key}
		fromStart := latencyResult{name: row.name + " (thrash start)", key: row.key + "-start"}
		fire := latencyResult{name: "  kernel trigger fire (crossing)", key: row.key + "-fire"}
		agentPart := latencyResult{name: "  agent (fire -> condition)", key: row.key + "-agent"}
		unseen := 0
		for i := 0; i < row.episodes; i++ {
			s.waitQuiet(b, row.quiet, 3*time.Minute)
			nw.until(time.Minute, "the memory condition False", func(n *corev1.Node) bool { return !isTrue(n) })
			start := s.arm(stall)
			kernel.arm()
			th.Start(b, 4)
			nw.until(time.Minute, fmt.Sprintf("episode %d's condition True", i), isTrue)
			seen := time.Now()
			if err := th.Stop(); err != nil {
				b.Fatal(err)
			}
			// The sampler may see the crossing a read after the kernel's
			// trigger did (or the kernel's window may round it earlier).
			crossed, ok := s.crossing()
			for wait := time.Now().Add(2 * window); !ok && time.Now().Before(wait); crossed, ok = s.crossing() {
				time.Sleep(10 * time.Millisecond)
			}
			if !ok {
				// The sampler reads every 250 ms and interpolates: a
				// stall that crossed between two reads and fell back is
				// missed. The episode is counted, not timed.
				unseen++
				b.Logf("episode %d: the condition turned True, but the sampler never saw the stall within %v reach %v: not timed", i, window, stall)
				continue
			}
			res.up = append(res.up, seen.Sub(crossed))
			fireLatency := "none"
			if fired, ok := kernel.fired(); ok {
				fire.up = append(fire.up, fired.Sub(crossed))
				agentPart.up = append(agentPart.up, seen.Sub(fired))
				fireLatency = fired.Sub(crossed).Round(time.Millisecond).String()
			}
			fromStart.up = append(fromStart.up, seen.Sub(start))
			b.Logf("%s episode %d: crossing -> condition %v, thrash start -> crossing %v, crossing -> the benchmark's own trigger fired %s",
				row.key, i, seen.Sub(crossed).Round(time.Millisecond), crossed.Sub(start).Round(time.Millisecond), fireLatency)
		}
		if unseen > 0 {
			b.Logf("%s: %d of %d episodes not timed (the sampler missed the crossing)", row.key, unseen, row.episodes)
		}
		results = append(results, res, fromStart, fire, agentPart)
	}
	report(b, results...)
	b.Logf("with the rule's `for` (damping) the condition comes `for` later than these figures; the memory probe's default is for: 30s")
}

// runPSIAgent runs an agent with only the memory probe (for: 0s,
// clearAfter: 0s, memory's settings as given) on node.
func runPSIAgent(b *testing.B, c kubernetes.Interface, node, memory string) {
	b.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`probes:
  memory:
    for: 0s
    clearAfter: 0s
    %s
  disk: {enabled: false}
  pid: {enabled: false}
  network: {enabled: false}
  gpu: {enabled: false}
`, memory)))
	if err != nil {
		b.Fatal(err)
	}
	specs, err := cfg.ProbeSpecs(probes.Host{Root: "/"}, "")
	if err != nil {
		b.Fatalf("ProbeSpecs: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("PSI_BENCH_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", node)
	}
	startAgent(b, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs, Rules: cfg.TaintRules(), Logger: log})
}

// hasCapSysResource reports whether this process may arm PSI triggers
// with windows that are not a multiple of 2s.
func hasCapSysResource() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capget(&hdr, &data[0]) == nil && data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) != 0
}

// psiNow is the sampler's latest view of /proc/pressure/memory's "some".
type psiNow struct {
	// trailing is the stall within the trailing window.
	trailing time.Duration
	avg10    float64
}

// psiSample is one read of the "some" line.
type psiSample struct {
	at    time.Time
	total uint64 // µs
	avg10 float64
}

// psiSampler reads /proc/pressure/memory every 250ms and finds when the
// stall within the trailing window first reaches a threshold after arm,
// interpolating between reads. Not faster: on the 6.18 kernel this was
// written on, reading the pressure file every 10-100ms delays the
// kernel's trigger events by seconds or suppresses them (every 250ms
// does not), so a faster sampler would slow down what it measures.
type psiSampler struct {
	window time.Duration
	mu     sync.Mutex
	// samples covers at least the last window and a read before it
	// (guarded by mu).
	samples []psiSample
	// threshold is what arm asked for; 0 when not armed (guarded by mu).
	threshold time.Duration
	// prev is the trailing stall at the read before the last (guarded by
	// mu).
	prev time.Duration
	// crossed is when the trailing stall first reached threshold since
	// arm; zero until then (guarded by mu).
	crossed time.Time
}

// psiSampleEvery is the sampler's period.
const psiSampleEvery = 250 * time.Millisecond

func newPSISampler(b *testing.B, window time.Duration) *psiSampler {
	s := &psiSampler{window: window}
	done := make(chan struct{})
	stopped := make(chan struct{})
	b.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		t := time.NewTicker(psiSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			data, err := os.ReadFile("/proc/pressure/memory")
			if err != nil {
				continue
			}
			if p, ok := parseSome(data); ok {
				s.add(p)
			}
		}
	}()
	return s
}

// parseSome reads the "some" line's total and avg10.
func parseSome(data []byte) (psiSample, bool) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "some" {
		return psiSample{}, false
	}
	p := psiSample{at: time.Now()}
	var err1, err2 error
	p.avg10, err1 = strconv.ParseFloat(strings.TrimPrefix(f[1], "avg10="), 64)
	p.total, err2 = strconv.ParseUint(strings.TrimPrefix(f[4], "total="), 10, 64)
	return p, err1 == nil && err2 == nil
}

func (s *psiSampler) add(p psiSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, p)
	// Keep the newest read at or before now-window-a period, and all
	// after it.
	cut := 0
	for i, q := range s.samples {
		if p.at.Sub(q.at) >= s.window+psiSampleEvery {
			cut = i
		}
	}
	s.samples = slices.Delete(s.samples, 0, cut)
	cur := s.trailingLocked()
	if s.threshold > 0 && s.crossed.IsZero() && cur >= s.threshold && len(s.samples) >= 2 {
		// The trailing stall grew from prev to cur between the last two
		// reads: the crossing is where the line between them meets the
		// threshold.
		last := s.samples[len(s.samples)-2]
		frac := 1.0
		if cur > s.prev && s.prev < s.threshold {
			frac = float64(s.threshold-s.prev) / float64(cur-s.prev)
		}
		s.crossed = last.at.Add(time.Duration(frac * float64(p.at.Sub(last.at))))
	}
	s.prev = cur
}

// totalAt is the "some" total at t, interpolated between reads (the
// oldest read's before them).
func (s *psiSampler) totalAt(t time.Time) float64 {
	for i := len(s.samples) - 1; i > 0; i-- {
		a, b := s.samples[i-1], s.samples[i]
		if !a.at.After(t) {
			if !b.at.After(a.at) {
				return float64(b.total)
			}
			f := float64(t.Sub(a.at)) / float64(b.at.Sub(a.at))
			return float64(a.total) + min(f, 1)*float64(b.total-a.total)
		}
	}
	return float64(s.samples[0].total)
}

// trailingLocked is the stall within the window before the last read.
func (s *psiSampler) trailingLocked() time.Duration {
	if len(s.samples) < 2 {
		return 0
	}
	last := s.samples[len(s.samples)-1]
	return time.Duration(float64(last.total)-s.totalAt(last.at.Add(-s.window))) * time.Microsecond
}

func (s *psiSampler) now() psiNow {
	s.mu.Lock()
	defer s.mu.Unlock()
	var avg float64
	if n := len(s.samples); n > 0 {
		avg = s.samples[n-1].avg10
	}
	return psiNow{trailing: s.trailingLocked(), avg10: avg}
}

// waitQuiet waits until quiet holds on the sampler's view, and a window
// more (so the kernel's trigger holds no breach to report late).
func (s *psiSampler) waitQuiet(b *testing.B, quiet func(psiNow) bool, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !quiet(s.now()) {
		if time.Now().After(deadline) {
			b.Fatalf("memory pressure did not calm within %v: %+v", timeout, s.now())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(s.window)
}

// arm starts looking for the trailing stall to reach threshold, and
// returns when it started.
func (s *psiSampler) arm(threshold time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.threshold, s.crossed, s.prev = threshold, time.Time{}, s.trailingLocked()
	return time.Now()
}

// crossing is when the trailing stall reached the threshold since arm.
func (s *psiSampler) crossing() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crossed, !s.crossed.IsZero()
}

// kernelTrigger is the benchmark's own PSI trigger, the same as the stall
// rule's, so the table can tell the kernel's part of the latency (the
// crossing to the fire) from the agent's.
type kernelTrigger struct {
	mu sync.Mutex
	// armedAt is when arm was last called; first is the first fire after
	// it (zero: none yet). Both guarded by mu.
	armedAt, first time.Time
}

func newKernelTrigger(b *testing.B, spec string) *kernelTrigger {
	b.Helper()
	fd, err := unix.Open("/proc/pressure/memory", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatalf("opening /proc/pressure/memory: %v", err)
	}
	if _, err := unix.Write(fd, append([]byte(spec), 0)); err != nil {
		b.Fatalf("arming %q: %v", spec, err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	k := &kernelTrigger{}
	done := make(chan struct{})
	b.Cleanup(func() {
		_, _ = unix.Write(stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-done
		unix.Close(fd)
		unix.Close(stop)
	})
	go func() {
		defer close(done)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}, {Fd: int32(stop), Events: unix.POLLIN}}
		for {
			fds[0].Revents, fds[1].Revents = 0, 0
			if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			if fds[1].Revents != 0 {
				return
			}
			if fds[0].Revents&unix.POLLPRI != 0 {
				k.mu.Lock()
				if k.first.IsZero() && !k.armedAt.IsZero() {
					k.first = time.Now()
				}
				k.mu.Unlock()
			}
		}
	}()
	return k
}

func (k *kernelTrigger) arm() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armedAt, k.first = time.Now(), time.Time{}
}

func (k *kernelTrigger) fired() (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.first, !k.first.IsZero()
}
