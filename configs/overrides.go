package configs

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
)

// overrideNameRE is what an override's name may hold: the bytes an exposed
// name keeps unchanged, so the exposed name is exactly
// <prefix><separator><name> and never a hashed form.
var overrideNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// overrides checks the [upstreams.NAME.overrides.TOOL] tables of u (p is
// upstreams.NAME.overrides): names, exposed lengths, non-empty texts, and
// fixed arguments that encode as JSON. Two overrides of u that expose one
// name are an error here; collisions across upstreams are found by
// overrideCollisions.
func (v *validator) overrides(p keyPath, raw map[string]*rawOverride, u *Upstream, sep string, maxLen int) map[string]*Override {
	if raw == nil {
		return nil
	}
	out := make(map[string]*Override, len(raw))
	for _, tool := range slices.Sorted(maps.Keys(raw)) {
		r, tp := raw[tool], p.key(tool)
		if r == nil {
			continue
		}
		o := &Override{}
		if tool == "" {
			v.errorf(tp, "an override needs the upstream's tool name as its key")
		}
		if r.Name == nil && r.Title == nil && r.Description == nil && r.Args == nil {
			v.errorf(tp, "override of tool %q sets nothing: give name, title, description or args", tool)
		}
		if r.Name != nil {
			o.Name = *r.Name
			exposed := exposedName(u.Prefix, sep, o.Name)
			switch {
			case !overrideNameRE.MatchString(o.Name):
				v.errorf(tp.key("name"), "name %q may use only A-Z a-z 0-9 _ - (and not be empty)", o.Name)
			case len(exposed) > maxLen:
				v.errorf(tp.key("name"), "name %q is exposed as %q, %d bytes, longer than server.max_name_length (%d)", o.Name, exposed, len(exposed), maxLen)
			case u.Prefix == "" && strings.HasPrefix(o.Name, ReservedPrefix+sep):
				v.errorf(tp.key("name"), "name %q of unprefixed upstream %q is in the namespace %q, which is reserved for viewmux's own tools", o.Name, u.Name, ReservedPrefix+sep)
			}
		}
		o.Title = v.overrideText(tp.key("title"), r.Title)
		o.Description = v.overrideText(tp.key("description"), r.Description)
		if r.Args != nil {
			o.Args = make(map[string]json.RawMessage, len(r.Args))
			folded := map[string]string{}
			for _, k := range slices.Sorted(maps.Keys(r.Args)) {
				ap := tp.key("args", k)
				if k == "" {
					v.errorf(ap, "empty argument name")
					continue
				}
				// An upstream whose decoder folds case (Go's does) would
				// read either of two such keys.
				if other, dup := folded[foldCase(k)]; dup {
					v.errorf(ap, "argument %q and argument %q are one argument to decoders that ignore case; fix only one", k, other)
					continue
				}
				folded[foldCase(k)] = k
				val, err := jsonValue(r.Args[k])
				if err != nil {
					v.errorf(ap, "%v", err)
					continue
				}
				b, err := json.Marshal(val)
				if err != nil {
					v.errorf(ap, "not encodable as JSON: %v", err)
					continue
				}
				o.Args[k] = b
			}
		}
		out[tool] = o
	}
	// Two overrides of one upstream may not end on one name, nor an
	// override on the name another override keeps.
	byName := map[string]string{}
	for _, tool := range slices.Sorted(maps.Keys(out)) {
		name := out[tool].Exposed(tool)
		if other, dup := byName[name]; dup {
			np := p.key(tool)
			if out[tool].Name != "" {
				np = np.key("name")
			}
			v.errorf(np, "tool %q would be exposed as %q, like tool %q (%s, line %d): two tools of upstream %q cannot share a name",
				tool, exposedName(u.Prefix, sep, name), other, p.key(other), v.lines.line(p.key(other)), u.Name)
			continue
		}
		byName[name] = tool
	}
	return out
}

// overrideText returns an override's title or description; "" (given,
// but empty) is an error: leaving the key out keeps the upstream's.
func (v *validator) overrideText(p keyPath, s *string) string {
	if s == nil {
		return ""
	}
	if strings.TrimSpace(*s) == "" {
		v.errorf(p, "must not be empty; leave it out to keep the upstream's")
	}
	return *s
}

// overrideCollisions reports overrides of different upstreams that would
// expose one name (only unprefixed upstreams can), and a renamed tool of
// an unprefixed upstream inside another upstream's namespace, where it
// would be refused at every catalog merge.
func (v *validator) overrideCollisions(ups []*Upstream, sep string) {
	type origin struct {
		up, tool string
	}
	seen := map[string]origin{}
	for _, u := range ups {
		p := keyPath{"upstreams", u.Name, "overrides"}
		for _, tool := range slices.Sorted(maps.Keys(u.Overrides)) {
			o := u.Overrides[tool]
			name := o.Exposed(tool)
			exposed := exposedName(u.Prefix, sep, name)
			if u.Prefix == "" && o.Name != "" {
				for _, w := range ups {
					if w.Prefix != "" && strings.HasPrefix(name, w.Prefix+sep) {
						v.errorf(p.key(tool, "name"), "name %q of unprefixed upstream %q is in the namespace %q of upstream %q", name, u.Name, w.Prefix+sep, w.Name)
					}
				}
			}
			if first, dup := seen[exposed]; dup && first.up != u.Name {
				fp := keyPath{"upstreams", first.up, "overrides", first.tool}
				v.errorf(p.key(tool), "tool %q of upstream %q would be exposed as %q, like tool %q of upstream %q (%s, line %d)",
					tool, u.Name, exposed, first.tool, first.up, fp, v.lines.line(fp))
				continue
			}
			seen[exposed] = origin{u.Name, tool}
		}
	}
}

// exposedName is the exposed form of a valid name.
func exposedName(prefix, sep, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + sep + name
}

// foldCase is the form under which decoders that ignore case (Go's) take
// two keys for one.
func foldCase(k string) string { return strings.ToLower(strings.ToUpper(k)) }

// jsonValue checks that a decoded TOML value is a JSON value (no
// datetimes, no NaN or infinities) and returns it.
func jsonValue(x any) (any, error) {
	switch x := x.(type) {
	case string, bool, int64:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
		return x, nil
	case []any:
		for _, e := range x {
			if _, err := jsonValue(e); err != nil {
				return nil, err
			}
		}
		return x, nil
	case []map[string]any:
		for _, e := range x {
			if _, err := jsonValue(e); err != nil {
				return nil, err
			}
		}
		return x, nil
	case map[string]any:
		for _, e := range x {
			if _, err := jsonValue(e); err != nil {
				return nil, err
			}
		}
		return x, nil
	}
	return nil, fmt.Errorf("a TOML %s is not a JSON value; write it as a string", tomlType(x))
}
