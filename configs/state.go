package configs

import (
	"encoding/hex"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Defaults and bounds of [state].
const (
	defaultStateKeyPrefix = "viewmux:"
	defaultStateTimeout   = time.Second
	maxStateTimeout       = 30 * time.Second
	maxStateKeyPrefix     = 64
	stateKeyHexLen        = 64 // 32 bytes
)

// stateDBRE is the path of a state url: a database number.
var stateDBRE = regexp.MustCompile(`^/[0-9]{1,9}$`)

// state checks the [state] table. It runs after the upstreams are built:
// whether an encryption key is required depends on them. No message it
// records holds the url, a key, or any part of them.
func (v *validator) state(r *rawState, upstreams []*Upstream) State {
	p := keyPath{"state"}
	s := State{
		KeyPrefix: defaultStateKeyPrefix,
		Timeout:   v.duration(p.key("timeout"), r.Timeout, defaultStateTimeout),
		Line:      v.lines.line(p),
	}
	if s.Timeout > maxStateTimeout {
		v.errorf(p.key("timeout"), "must be at most %s: a store that slow holds up every call that needs it; got %s", maxStateTimeout, s.Timeout)
	}
	if r.URL != nil {
		if u, ok := v.expand(p.key("url"), *r.URL); ok && u != "" {
			if msg := checkStateURL(u); msg != "" {
				v.errorf(p.key("url"), "%s", msg)
			}
			s.URL = u // kept when invalid too, so the key rules below see a store
		}
	}
	if r.KeyPrefix != nil {
		s.KeyPrefix = *r.KeyPrefix
		if msg := checkKeyPrefix(s.KeyPrefix); msg != "" {
			v.errorf(p.key("key_prefix"), "%s", msg)
		}
	}
	if r.EncryptionKey != nil {
		if k, ok := v.expand(p.key("encryption_key"), *r.EncryptionKey); ok && k != "" {
			s.EncryptionKey = v.stateKey(p.key("encryption_key"), k)
		} else if !ok {
			s.EncryptionKey = []byte{} // reported already: not missing
		}
	}
	for i, raw := range r.OldEncryptionKeys {
		kp := p.key("old_encryption_keys").at(i)
		k, ok := v.expand(kp, raw)
		switch {
		case !ok:
		case k == "":
			v.errorf(kp, "is empty: each entry is a previous encryption_key, 64 hex characters")
		default:
			if key := v.stateKey(kp, k); len(key) > 0 {
				s.OldEncryptionKeys = append(s.OldEncryptionKeys, key)
			}
		}
	}
	if len(r.OldEncryptionKeys) > 0 && s.EncryptionKey == nil {
		v.errorf(p.key("old_encryption_keys"), "needs state.encryption_key: the old keys only open what they sealed, and the current key seals")
	}
	if s.URL != "" && s.EncryptionKey == nil {
		for _, u := range upstreams {
			if u.OAuth != nil {
				v.errorf(p.key("encryption_key"), "state.url is set and the store then holds the OAuth logins of upstream %q: set state.encryption_key to 64 hex characters (32 bytes), e.g. the output of `openssl rand -hex 32`, to seal them", u.Name)
				break
			}
		}
	}
	if len(s.EncryptionKey) == 0 {
		s.EncryptionKey = nil
	}
	return s
}

// stateKey decodes an encryption key: exactly 64 hex characters. Its
// messages say what is wrong, never what the value is.
func (v *validator) stateKey(p keyPath, k string) []byte {
	if len(k) != stateKeyHexLen {
		v.errorf(p, "must be 64 hex characters (32 bytes), e.g. the output of `openssl rand -hex 32`; got %d characters", len(k))
		return []byte{}
	}
	key, err := hex.DecodeString(k)
	if err != nil {
		v.errorf(p, "must be 64 hex characters (32 bytes), e.g. the output of `openssl rand -hex 32`; it has a character that is not 0-9 or a-f")
		return []byte{}
	}
	return key
}

// checkStateURL returns what is wrong with s as state.url, or "" when
// nothing is. Its messages never repeat s or any part of its authority,
// which may hold a password.
func checkStateURL(s string) string {
	const want = "want redis://[user:password@]host[:port][/db] or rediss://… (TLS)"
	u, err := url.Parse(s)
	if err != nil {
		return "is not a valid URL; " + want
	}
	switch {
	case u.Scheme != "redis" && u.Scheme != "rediss":
		if u.Scheme == "" {
			return "has no scheme; " + want
		}
		return "url scheme " + quote(u.Scheme) + " is not redis or rediss; " + want
	case u.Opaque != "":
		return "is not a valid URL; " + want
	case u.Hostname() == "":
		return "url has no host; " + want
	case u.RawQuery != "" || u.ForceQuery:
		return "url has a query: options are the keys of [state]; " + want
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "url has a fragment; " + want
	case u.Path != "" && u.Path != "/" && !stateDBRE.MatchString(u.Path):
		return "url path must be /N, a database number, e.g. redis://redis:6379/0; " + want
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "url port must be a number from 1 to 65535; " + want
		}
	}
	return ""
}

// checkKeyPrefix returns what is wrong with p as state.key_prefix, or "".
func checkKeyPrefix(p string) string {
	switch {
	case p == "":
		return "must not be empty: every key and channel of the store starts with it"
	case len(p) > maxStateKeyPrefix:
		return "must be at most " + strconv.Itoa(maxStateKeyPrefix) + " characters, got " + strconv.Itoa(len(p))
	case strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r > '~' }):
		return "key_prefix " + strconv.QuoteToASCII(p) + " must be printable ASCII without spaces"
	case strings.ContainsAny(p, `*?[]\`):
		return "key_prefix " + quote(p) + " must not contain * ? [ ] or \\: SCAN MATCH and ACL key patterns would read them as wildcards"
	}
	return ""
}
