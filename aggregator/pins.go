package aggregator

import (
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/pins"
)

// This file applies pinned definitions (server.pin) to the merged catalog,
// before the filter pipeline: each upstream tool's definition, as exposed
// (and overridden), is checked against its pin, and under quarantine a
// changed or new tool is left out of the snapshot as if the upstream did not
// list it: no view, call or search can reach it until it is approved
// (`viewmux pins approve`).

// quarantined reports whether the pins hide e; src.pins is nil when
// pinning is off or src is down.
func (src *source) quarantined(e *filter.Entry) bool {
	if src.pins == nil {
		return false // before e.Definition, which may encode
	}
	return src.pins.Hide(e.Original, e.Tool.Name, e.Definition())
}

// pinRound starts the pins round of one rebuild, and hands each source
// whose catalog the build uses its part of it; nil when pinning is off.
// server.pin is the one the aggregator was made with: like every [server]
// key, it changes on restart, not on reload. Called with a.mu held.
func (a *Aggregator) pinRound(set *upstreamSet) *pins.Round {
	var round *pins.Round
	if a.opts.Pins != nil && (a.pinMode == configs.PinWarn || a.pinMode == configs.PinQuarantine) {
		round = a.opts.Pins.Round(a.pinMode == configs.PinQuarantine)
	}
	for _, src := range set.sources {
		src.pins = nil
		if round != nil && src.catalog != nil {
			src.pins = round.Upstream(src.cfg.Name)
		}
	}
	return round
}

// commitPins records what round saw and logs each change, with its diff.
// It returns the changes, for the snapshot. Called with a.mu held.
func (a *Aggregator) commitPins(round *pins.Round) []pins.Event {
	events, err := round.Commit()
	if err != nil {
		a.log.Error("pinned definitions: state file", "path", a.opts.Pins.Path(), "error", err)
	}
	for _, ev := range events {
		a.logPinEvent(ev)
	}
	return events
}

func (a *Aggregator) logPinEvent(ev pins.Event) {
	switch ev.Kind {
	case pins.KindPinned:
		a.log.Info("pinned tool definitions on first sight", "upstream", ev.Upstream, "tools", ev.Count)
	case pins.KindChanged, pins.KindNew:
		msg := "pinned tool definition changed; approve with `viewmux pins approve`"
		if ev.Kind == pins.KindNew {
			msg = "new tool on an upstream whose tools are pinned; approve with `viewmux pins approve`"
		}
		a.log.Warn(msg, "upstream", ev.Upstream, "tool", ev.Exposed, "quarantined", ev.Hidden,
			"hash", pins.ShortHash(ev.Hash), "pinned", pins.ShortHash(ev.Previous), "diff", ev.Diff)
	case pins.KindRemoved:
		a.log.Info("pinned tool no longer listed; its pin is kept", "upstream", ev.Upstream, "tool", ev.Tool)
	case pins.KindApproved:
		a.log.Info("pinned definition approved", "upstream", ev.Upstream, "tool", ev.Exposed, "hash", pins.ShortHash(ev.Hash))
	}
}

// RefreshPins reads the pins' state file again, and publishes a new
// snapshot when it changed (an approval reaches the running server this
// way). It does nothing when the aggregator has no pins.
func (a *Aggregator) RefreshPins() {
	if a.opts.Pins == nil {
		return
	}
	approved, changed, err := a.opts.Pins.Refresh()
	if err != nil {
		a.log.Error("pinned definitions: state file", "path", a.opts.Pins.Path(), "error", err)
	}
	for _, ev := range approved {
		a.logPinEvent(ev)
	}
	if changed {
		a.rebuild()
	}
}

// Pins returns the pins store the aggregator checks tools against, or
// nil when it has none.
func (a *Aggregator) Pins() *pins.Store { return a.opts.Pins }
