package memory

import (
	"path/filepath"
	"testing"

	"github.com/selftaint/selftaint/probes/probestest"
)

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		in      string
		want    meminfo
		wantErr string
	}{
		{"MemTotal: 100 kB\nMemAvailable: 50 kB\n", meminfo{TotalBytes: 102400, AvailableBytes: 51200}, ""},
		{"MemAvailable:   0 kB\nMemTotal:  1 kB", meminfo{TotalBytes: 1024}, ""},
		{"Foo\nMemTotal: 100 kB\nHugePages_Total: 0\nMemAvailable: 100 kB\n", meminfo{TotalBytes: 102400, AvailableBytes: 102400}, ""},
		{"", meminfo{}, "file is empty"},
		{" \n\n", meminfo{}, "file is empty"},
		{"MemTotal: 100 kB\n", meminfo{}, "no MemAvailable line"},
		{"MemAvailable: 100 kB\n", meminfo{}, "no MemTotal line"},
		{"MemTotal: 100\nMemAvailable: 50 kB\n", meminfo{}, `line 1: MemTotal: value "100" is not "<number> kB"`},
		{"MemTotal: 100 MB\nMemAvailable: 50 kB\n", meminfo{}, `value "100 MB"`},
		{"MemTotal: -100 kB\nMemAvailable: 50 kB\n", meminfo{}, `value "-100": strconv.ParseUint`},
		{"MemTotal: 100 kB\nMemTotal: 100 kB\nMemAvailable: 50 kB\n", meminfo{}, "line 2: MemTotal appears twice"},
		{"MemTotal: 0 kB\nMemAvailable: 0 kB\n", meminfo{}, "MemTotal is 0"},
		{"MemTotal: 100 kB\nMemAvailable: 101 kB\n", meminfo{}, "MemAvailable 101 kB exceeds MemTotal 100 kB"},
		{"MemTotal: 18014398509481984 kB\nMemAvailable: 1 kB\n", meminfo{}, "too large"},
	}
	for _, tt := range tests {
		probestest.CheckParse(t, "parseMeminfo", parseMeminfo, tt.in, tt.want, tt.wantErr)
	}
}

func TestParsePSI(t *testing.T) {
	tests := []struct {
		in      string
		want    psi
		wantErr string
	}{
		{
			"some avg10=1.50 avg60=0.75 avg300=0.25 total=12345\nfull avg10=0.50 avg60=0.10 avg300=0.00 total=678\n",
			psi{Some: psiLine{1.5, 0.75, 0.25, 12345}, Full: psiLine{0.5, 0.1, 0, 678}, HasFull: true}, "",
		},
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=0", psi{}, ""},
		{"some avg10=100.00 avg60=0.00 avg300=0.00 total=0 future=1\n", psi{Some: psiLine{Avg10: 100}}, ""},
		{"", psi{}, "file is empty"},
		{"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", psi{}, `no "some" line`},
		{"some avg10=0.00 avg60=0.00 avg300=0.00\n", psi{}, "line 1 (some): no total"},
		{"some avg10=0.00 avg60=0.00 total=0\n", psi{}, "no avg300"},
		{"some avg10=x avg60=0.00 avg300=0.00 total=0\n", psi{}, "avg10: strconv.ParseFloat"},
		{"some avg10=101.00 avg60=0.00 avg300=0.00 total=0\n", psi{}, "avg10=101.00 is not a percentage"},
		{"some avg10=NaN avg60=0.00 avg300=0.00 total=0\n", psi{}, "is not a percentage"},
		{"some avg10=-1 avg60=0.00 avg300=0.00 total=0\n", psi{}, "is not a percentage"},
		{"some avg10=0 avg10=0 avg60=0.00 avg300=0.00 total=0\n", psi{}, "avg10 appears twice"},
		{"some avg10 avg60=0.00 avg300=0.00 total=0\n", psi{}, `field "avg10" is not key=value`},
		{"some avg10=0 avg60=0 avg300=0 total=-5\n", psi{}, "total: strconv.ParseUint"},
		{"some avg10=0 avg60=0 avg300=0 total=0\nsome avg10=0 avg60=0 avg300=0 total=0\n", psi{}, `line 2: "some" appears twice`},
		{"avg10=0 avg60=0 avg300=0 total=0\n", psi{}, `want "some" or "full"`},
	}
	for _, tt := range tests {
		probestest.CheckParse(t, "parsePSI", parsePSI, tt.in, tt.want, tt.wantErr)
	}
}

func FuzzParseMeminfo(f *testing.F) {
	probestest.AddProcFixtures(f, "meminfo")
	f.Add([]byte("MemTotal: 1 kB\nMemAvailable: 1 kB"))
	f.Add([]byte("MemTotal:: 1 kB\nMemAvailable: 1 kB kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseMeminfo(data)
		if err != nil {
			return
		}
		if m.TotalBytes == 0 || m.AvailableBytes > m.TotalBytes || m.TotalBytes%1024 != 0 || m.AvailableBytes%1024 != 0 {
			t.Errorf("parseMeminfo(%q) = %+v: not a sane result", data, m)
		}
	})
}

func FuzzParsePSI(f *testing.F) {
	probestest.AddProcFixtures(f, filepath.Join("pressure", "memory"))
	f.Add([]byte("some avg10=1e2 avg60=0x1p-2 avg300=Inf total=0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parsePSI(data)
		if err != nil {
			return
		}
		lines := []psiLine{p.Some}
		if p.HasFull {
			lines = append(lines, p.Full)
		}
		for _, l := range lines {
			for _, v := range []float64{l.Avg10, l.Avg60, l.Avg300} {
				if !finitePercent(v) {
					t.Errorf("parsePSI(%q) = %+v: average %v is not a percentage", data, p, v)
				}
			}
		}
	})
}
