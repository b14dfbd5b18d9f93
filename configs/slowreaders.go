package configs

import "time"

// Defaults of what a client that does not read may cost.
const (
	// defaultMaxPendingPerCaller is eight sessions' default
	// max_pending_bytes: room for a caller's few clients each to fall
	// behind by a large answer, while a thousand such callers still fit in
	// a machine's memory.
	defaultMaxPendingPerCaller = 64 << 20
	defaultWriteTimeout        = 30 * time.Second
)

// slowReaders reads server.max_pending_bytes_per_caller and
// server.write_timeout into s, whose MaxPendingBytes is read already.
func (v *validator) slowReaders(p keyPath, r *rawServer, s *Server) {
	s.WriteTimeout = v.duration(p.key("write_timeout"), r.WriteTimeout, defaultWriteTimeout)
	s.MaxPendingBytesPerCaller = max(defaultMaxPendingPerCaller, s.MaxPendingBytes)
	if r.MaxPendingBytesPerCaller == nil {
		return
	}
	s.MaxPendingBytesPerCaller = v.size(p.key("max_pending_bytes_per_caller"), r.MaxPendingBytesPerCaller, s.MaxPendingBytesPerCaller)
	if s.MaxPendingBytesPerCaller < s.MaxPendingBytes {
		v.errorf(p.key("max_pending_bytes_per_caller"), "%d bytes is less than server.max_pending_bytes (%d): it bounds all of a caller's sessions together, so it must hold at least one session's",
			s.MaxPendingBytesPerCaller, s.MaxPendingBytes)
	}
}
