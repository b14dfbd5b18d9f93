package configs

import (
	"strings"
	"testing"
	"time"
)

// TestSlowReaderKeys: server.write_timeout and
// server.max_pending_bytes_per_caller read as a duration and a size, with
// their defaults, and a bad value is an error naming the key.
func TestSlowReaderKeys(t *testing.T) {
	tests := []struct {
		name      string
		server    string
		timeout   time.Duration
		perCaller int64
		err       string // substring of the one error expected; "" = none
	}{
		{"defaults", "", 30 * time.Second, 64 << 20, ""},
		{"set", "write_timeout = \"2s\"\nmax_pending_bytes_per_caller = \"16MiB\"\n", 2 * time.Second, 16 << 20, ""},
		{"bytes as an integer", "max_pending_bytes_per_caller = 9000000\n", 30 * time.Second, 9000000, ""},
		{"default follows a larger max_pending_bytes", "max_pending_bytes = \"100MiB\"\n", 30 * time.Second, 100 << 20, ""},
		{"equal to max_pending_bytes", "max_pending_bytes = \"1MiB\"\nmax_pending_bytes_per_caller = \"1MiB\"\n", 30 * time.Second, 1 << 20, ""},
		{"below max_pending_bytes", "max_pending_bytes = \"8MiB\"\nmax_pending_bytes_per_caller = \"1MiB\"\n", 0, 0,
			"server.max_pending_bytes_per_caller: 1048576 bytes is less than server.max_pending_bytes (8388608)"},
		{"zero bytes", "max_pending_bytes_per_caller = 0\n", 0, 0, "server.max_pending_bytes_per_caller: size must be positive"},
		{"not a size", "max_pending_bytes_per_caller = \"lots\"\n", 0, 0, `server.max_pending_bytes_per_caller: invalid size "lots"`},
		{"a bare number of seconds", "write_timeout = 30\n", 0, 0, "server.write_timeout: invalid duration 30: want a string with a unit"},
		{"zero timeout", "write_timeout = \"0s\"\n", 0, 0, `server.write_timeout: duration "0s" must be positive`},
		{"negative timeout", "write_timeout = \"-1s\"\n", 0, 0, `server.write_timeout: duration "-1s" must be positive`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := "[server]\n" + tt.server + "[upstreams.a]\ncommand = \"srv\"\n"
			cfg, err := Parse("test.toml", []byte(text), nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse: %v, want an error containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Server.WriteTimeout != tt.timeout || cfg.Server.MaxPendingBytesPerCaller != tt.perCaller {
				t.Errorf("write_timeout %v, max_pending_bytes_per_caller %d; want %v, %d",
					cfg.Server.WriteTimeout, cfg.Server.MaxPendingBytesPerCaller, tt.timeout, tt.perCaller)
			}
		})
	}
}
