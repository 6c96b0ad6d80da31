package gpu

import (
	"testing"
)

// NVRM Xid lines parse as the drivers print them, with any log prefix;
// everything else is no Xid.
func TestParseNVRMXid(t *testing.T) {
	tests := []struct {
		name string
		line string
		ok   bool
		want KernelXid
	}{
		{name: "current driver", line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "pid=1234, name=python3, GPU has fallen off the bus."}},
		{name: "pid unknown, quoted", line: "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 0, SM 1): Out Of Range Address",
			ok: true, want: KernelXid{PCIBusID: "0000:cb:00.0", Xid: 13, Text: "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 0, SM 1): Out Of Range Address"}},
		{name: "older driver, no PCI: and no pid", line: "NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "GPU has fallen off the bus."}},
		{name: "double bit error", line: "NVRM: Xid (PCI:0000:3b:00): 48, pid=2291, name=train, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 48, Text: "pid=2291, name=train, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."}},
		{name: "channel id", line: "NVRM: Xid (PCI:0000:07:00): 31, pid=9, name=x, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS",
			ok: true, want: KernelXid{PCIBusID: "0000:07:00.0", Xid: 31, Text: "pid=9, name=x, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS"}},
		{name: "dmesg timestamp prefix", line: "[12345.678901] NVRM: Xid (PCI:0000:B7:00): 119, pid=77, name=nv, Timeout after 6s of waiting for RPC response from GPU1 GSP!",
			ok: true, want: KernelXid{PCIBusID: "0000:b7:00.0", Xid: 119, Text: "pid=77, name=nv, Timeout after 6s of waiting for RPC response from GPU1 GSP!"}},
		{name: "kmsg priority prefix", line: "<3>NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}},
		{name: "syslog prefix, trailing newline", line: "Mar  1 12:00:00 node1 kernel: [  42.1] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "GPU has fallen off the bus."}},
		{name: "8-digit domain as NVML writes it", line: "NVRM: Xid (PCI:00000000:3B:00): 79, x",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "x"}},
		{name: "VMD domain", line: "NVRM: Xid (PCI:10000:01:00): 79, x",
			ok: true, want: KernelXid{PCIBusID: "10000:01:00.0", Xid: 79, Text: "x"}},
		{name: "function printed", line: "NVRM: Xid (PCI:0000:3b:00.0): 94, x",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 94, Text: "x"}},
		{name: "no text", line: "NVRM: Xid (PCI:0000:3b:00): 79",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79}},
		{name: "largest number", line: "NVRM: Xid (PCI:0000:3b:00): 18446744073709551615, x",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 18446744073709551615, Text: "x"}},
		{name: "number past 64 bits", line: "NVRM: Xid (PCI:0000:3b:00): 18446744073709551616, x"},
		{name: "huge number", line: "NVRM: Xid (PCI:0000:3b:00): 999999999999999999999999999999, x"},
		{name: "negative number", line: "NVRM: Xid (PCI:0000:3b:00): -79, x"},
		{name: "number with letters", line: "NVRM: Xid (PCI:0000:3b:00): 79abc, x"},
		{name: "no number", line: "NVRM: Xid (PCI:0000:3b:00): , x"},
		{name: "bus id garbage", line: "NVRM: Xid (PCI:zz:3b:00): 79, x"},
		{name: "no bus id", line: "NVRM: Xid (): 79, x"},
		{name: "other NVRM line", line: "NVRM: GPU at PCI:0000:3b:00: GPU-5d5b4d3f-0a4e-4d8b-9c36-000000000000"},
		{name: "NVRM version", line: "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"},
		{name: "NVRM fallen off without Xid", line: "NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:20b0) installed in this system has fallen off the bus."},
		{name: "NVSwitch SXid", line: "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error"},
		{name: "empty", line: ""},
		{name: "garbage", line: "\x00\xff NVRM: Xid ((((( 79"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseNVRMXid(tt.line)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ParseNVRMXid(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
			}
		})
	}
}
