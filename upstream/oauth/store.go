package oauth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/viewmux/viewmux/internal/statedir"
)

// Record is what the token file of one upstream holds: the login's
// tokens and everything needed to refresh them without discovery.
type Record struct {
	Upstream string `json:"upstream"`
	// User, for a per-user login (credentials = "per-user"), is the hash
	// of the identity it belongs to (UserKey); "" for the gateway's own.
	User string `json:"user,omitempty"`
	// Resource is the resource indicator the tokens were issued for.
	Resource string `json:"resource,omitempty"`
	// ServerURL is the upstream's url at login: a login for another URL
	// is not used.
	ServerURL     string `json:"server_url"`
	Issuer        string `json:"issuer"`
	TokenEndpoint string `json:"token_endpoint"`
	ClientID      string `json:"client_id"`
	ClientSecret  string `json:"client_secret,omitempty"`
	// AuthMethod is the token endpoint auth method: none,
	// client_secret_basic or client_secret_post.
	AuthMethod string `json:"auth_method"`
	// Scopes are the scopes asked for; Granted those the token response
	// named (nil = not said).
	Scopes       []string  `json:"scopes,omitempty"`
	Granted      []string  `json:"granted,omitempty"`
	AccessToken  string    `json:"access_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	TokenType    string    `json:"token_type,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	// WantScopes, when set, are scopes a call was refused for
	// (insufficient_scope) after this login: the next login asks for them
	// too.
	WantScopes []string  `json:"want_scopes,omitempty"`
	LoggedInAt time.Time `json:"logged_in_at"`
}

// String never shows the tokens or the client secret.
func (r *Record) String() string {
	if r.User != "" {
		return fmt.Sprintf("oauth login of a user of upstream %q at %s", r.Upstream, r.Issuer)
	}
	return fmt.Sprintf("oauth login of upstream %q at %s", r.Upstream, r.Issuer)
}

// key is the store key of r's token file: its upstream's name, and for a
// user's login that user's hash.
func (r *Record) key() string { return storeKey(r.Upstream, r.User) }

// storeKey is the store key of upstream name's login of the user with
// hash user ("" = the gateway's own login).
func storeKey(name, user string) string {
	if user == "" {
		return name
	}
	return name + ".user-" + user
}

// UserKey is the hash a user's token file is keyed by: the identity
// (Client.Caller: "oauth:" and a subject, "token:" and a token's hash)
// never appears in a file name, and no identity can name a path.
func UserKey(identity string) string {
	sum := sha256.Sum256([]byte("viewmux upstream user\x00" + identity))
	return hex.EncodeToString(sum[:])
}

// GoString never shows the tokens either (%#v).
func (r *Record) GoString() string { return r.String() }

// Store is the token files in one state directory: oauth-NAME.json (and
// oauth-NAME.user-HASH.json for each user of a per-user upstream), 0600,
// each replaced atomically. A Store is a value, safe for concurrent use
// (and by several processes: writes take the directory's lock).
type Store struct {
	Dir statedir.Dir
}

// fileName is the token file of the store key name (a config name, A-Z
// a-z 0-9 _ . -, and for a user's login ".user-" and a hex hash: never a
// path).
func fileName(name string) string { return "oauth-" + name + ".json" }

// Path returns the token file of the store key name (an upstream's name
// for the gateway's login).
func (s Store) Path(name string) string { return s.Dir.File(fileName(name)) }

// Load returns the record of upstream name and the file's modification
// time; nil (and no error) when there is none.
func (s Store) Load(name string) (*Record, time.Time, error) {
	if s.Dir.Path == "" {
		return nil, time.Time{}, statedir.ErrNoDir
	}
	fi, err := os.Stat(s.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("token file: %w", err)
	}
	b, err := s.Dir.ReadFile(fileName(name))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("token file: %w", err)
	}
	if b == nil {
		return nil, time.Time{}, nil
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		// The error of json may quote the file; say only where it is.
		return nil, time.Time{}, fmt.Errorf("token file %s is not valid JSON: remove it and log in again", s.Path(name))
	}
	return &r, fi.ModTime(), nil
}

// lockName is the lock file every writer of token files holds.
const lockName = ".oauth.lock"

// Save replaces the record of r.Upstream (0600, atomic), holding the
// directory's lock.
func (s Store) Save(r *Record) error {
	unlock, err := s.Dir.Lock(lockName)
	if err != nil {
		return err
	}
	defer unlock()
	return s.write(r)
}

// write is Save for a caller that holds the lock already.
func (s Store) write(r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return s.Dir.WriteFile(fileName(r.key()), append(b, '\n'))
}

// Delete removes the record of upstream name; a missing one is no error.
// removed says whether there was one.
func (s Store) Delete(name string) (removed bool, err error) {
	if s.Dir.Path == "" {
		return false, statedir.ErrNoDir
	}
	unlock, err := s.Dir.Lock(lockName)
	if err != nil {
		return false, err
	}
	defer unlock()
	err = os.Remove(s.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("token file: %w", err)
	}
	return true, nil
}

// Users returns the UserKeys of the users of upstream name with a token
// file in the store, the most recently written first.
func (s Store) Users(name string) []string {
	if s.Dir.Path == "" {
		return nil
	}
	prefix := "oauth-" + name + ".user-"
	entries, err := os.ReadDir(s.Dir.Path)
	if err != nil {
		return nil
	}
	type user struct {
		key string
		mod time.Time
	}
	var us []user
	for _, e := range entries {
		k, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !strings.HasSuffix(k, ".json") || !e.Type().IsRegular() {
			continue
		}
		k = strings.TrimSuffix(k, ".json")
		if len(k) != 2*sha256.Size || strings.Trim(k, "0123456789abcdef") != "" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		us = append(us, user{k, fi.ModTime()})
	}
	slices.SortFunc(us, func(a, b user) int { return b.mod.Compare(a.mod) })
	keys := make([]string, len(us))
	for i, u := range us {
		keys[i] = u.key
	}
	return keys
}
