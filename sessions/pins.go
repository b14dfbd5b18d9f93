package sessions

import (
	"time"

	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/pins"
)

// This file records the changes to pinned tool definitions a snapshot's
// build found (aggregator/pins.go): each in the audit log and in the
// viewmux_pin_changes_total metric. The aggregator logs them with their
// diff; approvals are audited by `viewmux pins approve`, which makes them.

// recordPins audits and counts events.
func (s *Server) recordPins(events []pins.Event) {
	now := time.Now().UTC()
	for _, ev := range events {
		if ev.Kind == pins.KindPinned || ev.Kind == pins.KindApproved {
			continue // a first sight is no change; an approval is audited by its maker
		}
		s.metrics.pinChanges.WithLabelValues(ev.Upstream, ev.Kind).Inc()
		s.audit.Write(PinRecord(now, ev), nil)
	}
}

// PinRecord is the audit record of one change to a pinned definition.
func PinRecord(now time.Time, ev pins.Event) audit.Record {
	rec := audit.Record{Time: now, Method: audit.MethodPins, Tool: ev.Exposed, Upstream: ev.Upstream,
		Decision: audit.Allowed, Hash: ev.Hash, PreviousHash: ev.Previous}
	if rec.Tool == "" {
		rec.Tool = ev.Tool
	}
	switch ev.Kind {
	case pins.KindChanged:
		rec.Reason = audit.ReasonPinChanged
	case pins.KindNew:
		rec.Reason = audit.ReasonPinNew
	case pins.KindRemoved:
		rec.Reason = audit.ReasonPinRemoved
	case pins.KindApproved:
		rec.Reason = audit.ReasonPinApproved
	}
	if ev.Hidden {
		rec.Decision = audit.Denied
	}
	return rec
}
