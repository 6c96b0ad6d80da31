package pid

import (
	"math"
	"testing"

	"github.com/selftaint/selftaint/probes/probestest"
)

func TestParseLoadavg(t *testing.T) {
	tests := []struct {
		in      string
		want    loadavg
		wantErr string
	}{
		{"0.52 0.58 0.59 3/1234 56789\n", loadavg{0.52, 0.58, 0.59, 3, 1234, 56789}, ""},
		{"0.00 0.00 0.00 0/1 1", loadavg{Threads: 1, LastPID: 1}, ""},
		{"", loadavg{}, "file is empty"},
		{"0.52 0.58 0.59 3/1234\n", loadavg{}, "got 4 fields, want 5"},
		{"0.52 0.58 0.59 3/1234 1 extra\n", loadavg{}, "got 6 fields"},
		{"x 0.58 0.59 3/1234 1\n", loadavg{}, "field 1: strconv.ParseFloat"},
		{"0.52 -1 0.59 3/1234 1\n", loadavg{}, `field 2: "-1" is not a load average`},
		{"0.52 0.58 NaN 3/1234 1\n", loadavg{}, `field 3: "NaN" is not a load average`},
		{"0.52 0.58 Inf 3/1234 1\n", loadavg{}, "field 3"},
		{"0.52 0.58 0.59 1234 1\n", loadavg{}, `field 4: "1234" is not running/total`},
		{"0.52 0.58 0.59 a/1234 1\n", loadavg{}, "field 4: running"},
		{"0.52 0.58 0.59 3/ 1\n", loadavg{}, "field 4: total"},
		{"0.52 0.58 0.59 3/-4 1\n", loadavg{}, "field 4: total"},
		{"0.52 0.58 0.59 0/0 1\n", loadavg{}, "total threads is 0"},
		{"0.52 0.58 0.59 3/1234 x\n", loadavg{}, "field 5"},
	}
	for _, tt := range tests {
		probestest.CheckParse(t, "parseLoadavg", parseLoadavg, tt.in, tt.want, tt.wantErr)
	}
}

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{"32768\n", 32768, ""},
		{"  4194304  ", 4194304, ""},
		{"", 0, "file is empty"},
		{"\n", 0, "file is empty"},
		{"0\n", 0, "limit is 0"},
		{"-1\n", 0, "invalid syntax"},
		{"12 34\n", 0, "invalid syntax"},
		{"99999999999999999999999\n", 0, "out of range"},
	}
	for _, tt := range tests {
		probestest.CheckParse(t, "parseLimit", parseLimit, tt.in, tt.want, tt.wantErr)
	}
}

func FuzzParseLoadavg(f *testing.F) {
	probestest.AddProcFixtures(f, "loadavg")
	f.Add([]byte("1e3 0x1p3 +Inf 1/1 1"))
	f.Add([]byte("0 0 0 /1 1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		la, err := parseLoadavg(data)
		if err != nil {
			return
		}
		if la.Threads == 0 {
			t.Errorf("parseLoadavg(%q) = %+v: no threads", data, la)
		}
		for _, v := range []float64{la.Load1, la.Load5, la.Load15} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Errorf("parseLoadavg(%q) = %+v: load %v is not sane", data, la, v)
			}
		}
	})
}
