package gpu

import (
	"errors"
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestXidSignal(t *testing.T) {
	eventsErr := errors.New("waiting for Xid events: Unknown Error")
	lostErr := fmt.Errorf("registering for Xid events: %w", nvml.ERROR_GPU_IS_LOST)
	resetErr := fmt.Errorf("registering for Xid events: %w", nvml.ERROR_RESET_REQUIRED)
	otherErr := fmt.Errorf("registering for Xid events: %w", nvml.ERROR_UNKNOWN)
	tests := []struct {
		name      string
		g         gpuState
		eventsErr error
		want      signal
		wantLost  error
	}{
		{"watched", gpuState{watched: true}, nil, signal{}, nil},
		{"watched, drain failed", gpuState{watched: true}, eventsErr, signal{err: eventsErr}, nil},
		{"not available", gpuState{watchNA: "not supported"}, eventsErr, signal{na: "not supported"}, nil},
		{"registering failed", gpuState{watchErr: otherErr}, nil, signal{err: otherErr}, nil},
		{"registering found it lost", gpuState{watchErr: lostErr}, nil, signal{err: lostErr}, lostErr},
		{"registering found it needing a reset", gpuState{watchErr: resetErr}, nil, signal{err: resetErr}, resetErr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, lost := xidSignal(&tt.g, tt.eventsErr)
			if got != tt.want || lost != tt.wantLost {
				t.Errorf("got %+v, %v, want %+v, %v", got, lost, tt.want, tt.wantLost)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		ret      nvml.Return
		wantOK   bool
		wantNA   string
		wantErr  string
		wantLost bool
	}{
		{nvml.SUCCESS, true, "", "", false},
		{nvml.ERROR_NOT_SUPPORTED, false, "not supported", "", false},
		{nvml.ERROR_UNKNOWN, false, "", "reading remapped rows: " + nvml.ERROR_UNKNOWN.Error(), false},
		{nvml.ERROR_GPU_IS_LOST, false, "", "reading remapped rows: " + nvml.ERROR_GPU_IS_LOST.Error(), true},
	}
	for _, tt := range tests {
		var r gpuReading
		ok := r.check(&r.remap, "remapped rows", tt.ret)
		gotErr := ""
		if r.remap.err != nil {
			gotErr = r.remap.err.Error()
		}
		if ok != tt.wantOK || r.remap.na != tt.wantNA || gotErr != tt.wantErr || (r.lost != nil) != tt.wantLost {
			t.Errorf("check(%v): got %v, na %q, err %q, lost %v, want %v, %q, %q, lost %v", tt.ret, ok, r.remap.na, gotErr, r.lost, tt.wantOK, tt.wantNA, tt.wantErr, tt.wantLost)
		}
		if tt.wantLost && r.lost != r.remap.err {
			t.Errorf("check(%v): lost = %v, want the signal's error", tt.ret, r.lost)
		}
	}

	// The first call that finds the GPU lost is the one kept.
	first := errors.New("first")
	r := gpuReading{lost: first}
	r.check(&r.clocks, "clock event reasons", nvml.ERROR_RESET_REQUIRED)
	if r.lost != first {
		t.Errorf("lost = %v, want %v", r.lost, first)
	}
}
