package benchenv

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestParseInt(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"", 7, false},
		{"  ", 7, false},
		{"1000", 1000, false},
		{" 42 ", 42, false},
		{"100_000", 100_000, false},
		{"0", 0, true},
		{"-3", 0, true},
		{"1k", 0, true},
		{"1.5", 0, true},
	}
	for _, tc := range tests {
		got, err := parseInt(tc.in, 7)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseInt(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseInts(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", []int{1, 2}, false},
		{"10000", []int{10000}, false},
		{"10000,100_000, 1000000", []int{10000, 100000, 1000000}, false},
		{"10000,,5", nil, true},
		{"10000,x", nil, true},
		{"0", nil, true},
	}
	for _, tc := range tests {
		got, err := parseInts(tc.in, []int{1, 2})
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("parseInts(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", time.Second, false},
		{"0", 0, false},
		{"250ms", 250 * time.Millisecond, false},
		{"2s", 2 * time.Second, false},
		{"-1s", 0, true},
		{"2", 0, true},
	}
	for _, tc := range tests {
		got, err := parseDuration(tc.in, time.Second)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestSettingsReadTheirVariable(t *testing.T) {
	t.Setenv(Prefix+"SESSIONS", "2500")
	t.Setenv(Prefix+"DELTAS", "10,20")
	t.Setenv(Prefix+"SPREAD", "3s")
	if got := Int(t, "SESSIONS", 1000); got != 2500 {
		t.Errorf("Int = %d, want 2500", got)
	}
	if got := Int(t, "UNSET_SETTING", 1000); got != 1000 {
		t.Errorf("Int of an unset variable = %d, want the default 1000", got)
	}
	if got := Ints(t, "DELTAS", 1); !slices.Equal(got, []int{10, 20}) {
		t.Errorf("Ints = %v, want [10 20]", got)
	}
	if got := Duration(t, "SPREAD", time.Second); got != 3*time.Second {
		t.Errorf("Duration = %v, want 3s", got)
	}
}

func TestSetProcs(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	want := prev + 1
	t.Setenv(ProcsEnv, "")
	if n, err := SetProcs(); err != nil || n != prev {
		t.Fatalf("SetProcs without %s = %d, %v; want GOMAXPROCS unchanged at %d", ProcsEnv, n, err, prev)
	}
	t.Setenv(ProcsEnv, "x")
	if _, err := SetProcs(); err == nil {
		t.Fatalf("SetProcs with %s=x succeeded", ProcsEnv)
	}
	t.Setenv(ProcsEnv, strconv.Itoa(want))
	if n, err := SetProcs(); err != nil || n != want || runtime.GOMAXPROCS(0) != want {
		t.Fatalf("SetProcs with %s=%d = %d, %v (GOMAXPROCS %d)", ProcsEnv, want, n, err, runtime.GOMAXPROCS(0))
	}
}

func TestProcsIsReportedAfterResetTimer(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	want := prev + 1
	t.Setenv(ProcsEnv, strconv.Itoa(want))
	var during int
	res := testing.Benchmark(func(b *testing.B) {
		Procs(b)
		b.ResetTimer()
		for b.Loop() {
			during = runtime.GOMAXPROCS(0)
		}
	})
	if during != want {
		t.Errorf("GOMAXPROCS in the benchmark = %d, want %d", during, want)
	}
	if got := res.Extra["procs"]; got != float64(want) {
		t.Errorf("procs metric = %v, want %d (metrics %v)", got, want, res.Extra)
	}
	if got := runtime.GOMAXPROCS(0); got != prev {
		t.Errorf("GOMAXPROCS after the benchmark = %d, want it restored to %d", got, prev)
	}
}

// TestRSS checks that RSS reads this process's resident set, which grows
// by what it touches, and another process's by its pid.
func TestRSS(t *testing.T) {
	before := RSS(t, 0)
	touched := make([]byte, 64<<20)
	for i := range touched {
		touched[i] = byte(i)
	}
	if after := RSS(t, os.Getpid()); after < before+48<<20 {
		t.Fatalf("RSS went from %d to %d bytes after touching 64 MiB", before, after)
	}
	runtime.KeepAlive(touched)
}
