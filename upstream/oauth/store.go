package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/statedir"
)

// Record is what the stored login of one upstream holds: the login's
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

// key is the store key of r: its upstream's name, and for a user's login
// that user's hash.
func (r *Record) key() string { return storeKey(r.Upstream, r.User) }

// storeKey is the store key of upstream name's login of the user with
// hash user ("" = the gateway's own login).
func storeKey(name, user string) string {
	if user == "" {
		return name
	}
	return name + ".user-" + user
}

// UserKey is the hash a user's login is keyed by: the identity
// (Client.Caller: "oauth:" and a subject, "token:" and a token's hash)
// never appears in a document key, and no identity can name a path.
func UserKey(identity string) string {
	sum := sha256.Sum256([]byte("viewmux upstream user\x00" + identity))
	return hex.EncodeToString(sum[:])
}

// GoString never shows the tokens either (%#v).
func (r *Record) GoString() string { return r.String() }

// Store is where logins are kept: documents of a state.Store, one per
// login, under the key oauth-NAME.json (and oauth-NAME.user-HASH.json for
// each user of a per-user upstream). On the files engine these are the
// token files of the state directory (0600, replaced atomically), as
// they have always been named. With a Sealer every record written is
// sealed (AES-256-GCM, the document key as additional data); without one
// records are plain JSON, which only the files engine accepts. A Store is
// a value, safe for concurrent use, by several processes and replicas.
type Store struct {
	// State holds the documents; nil = the files of Dir.
	State state.Store
	// Sealer seals what is written and opens what was sealed; nil =
	// records are written plain (refused on any engine but files).
	Sealer *state.Sealer
	// Dir is the state directory, used when State is nil.
	Dir statedir.Dir

	sealerFn func() *state.Sealer // Options.SealerFunc, when Sealer is nil
}

// sealer returns the sealer in force.
func (s Store) sealer() *state.Sealer {
	if s.Sealer == nil && s.sealerFn != nil {
		return s.sealerFn()
	}
	return s.Sealer
}

// store returns s.State, or the files of s.Dir.
func (s Store) store() state.Store {
	if s.State != nil {
		return s.State
	}
	return state.OpenFiles(s.Dir.Path)
}

// files reports whether the documents are files of a state directory.
func (s Store) files() bool { return s.State == nil || s.State.Engine() == "files" }

// DocKey returns the document key of the store key name (an upstream's
// name for the gateway's login, NAME.user-HASH for a user's).
func DocKey(name string) string { return "oauth-" + name + ".json" }

// IsLoginKey reports whether key is the document key of a login (DocKey):
// what `viewmux state copy` must re-seal rather than copy as it is.
func IsLoginKey(key string) bool {
	name, ok := strings.CutPrefix(key, "oauth-")
	if !ok {
		return false
	}
	name, ok = strings.CutSuffix(name, ".json")
	return ok && name != "" && !strings.HasPrefix(name, ".")
}

// Path returns where the login of the store key name is, for messages:
// its file on the files engine, else the store's address and the key.
func (s Store) Path(name string) string {
	if s.files() {
		if s.State != nil {
			return statedir.Dir{Path: s.State.Where()}.File(DocKey(name))
		}
		return s.Dir.File(DocKey(name))
	}
	return s.State.Engine() + " " + s.State.Where() + " key " + DocKey(name)
}

// where names the store in errors.
func (s Store) where() string {
	st := s.store()
	return fmt.Sprintf("state store %s %s", st.Engine(), st.Where())
}

// errPlainShared is what a plain record read from, or to be written to,
// a shared store fails with.
var errPlainShared = errors.New("an unsealed login on a shared state store: set state.encryption_key (the store keeps logins sealed)")

// encode returns what the document of r holds: r's JSON, sealed when s
// has a sealer.
func (s Store) encode(r *Record) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if sl := s.sealer(); sl != nil {
		return sl.Seal(DocKey(r.key()), b), nil
	}
	if !s.files() {
		return nil, errPlainShared
	}
	return b, nil
}

// decode reads the document b of the store key name. A sealed value
// opens with the sealer's key or an old one; a plain one is accepted from
// the files engine only. An error wraps state.ErrOtherKey when the value
// was sealed with a key this Store does not have.
func (s Store) decode(name string, b []byte) (*Record, error) {
	key := DocKey(name)
	var err error
	b, err = openLogin(key, b, s.sealer(), s.files())
	if err != nil {
		return nil, fmt.Errorf("login %s in %s: %w", key, s.where(), err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		// The error of json may quote the document; say only where it is.
		return nil, fmt.Errorf("login %s in %s is not valid JSON: remove it and log in again", key, s.where())
	}
	return &r, nil
}

// openLogin returns the plain JSON of the login document key holding b.
func openLogin(key string, b []byte, sealer *state.Sealer, files bool) ([]byte, error) {
	switch {
	case state.IsSealed(b) && sealer == nil:
		id, _, _ := strings.Cut(strings.TrimPrefix(string(b), "vmx1."), ".")
		return nil, fmt.Errorf("%w (key id %s; this replica has no state.encryption_key)", state.ErrOtherKey, clip(id, 32))
	case state.IsSealed(b):
		return sealer.Open(key, b)
	case !files:
		return nil, errPlainShared
	}
	return b, nil
}

// ResealLogin returns the login document key, read as b from one store,
// as it must be written to another: opened with from (the source's
// sealer; a plain value is taken as it is), and sealed with to. With no
// to (nil) the value is written plain, which only a files store (toFiles)
// may hold. It is how `viewmux state copy` moves logins between stores
// without ever writing a token unsealed to a shared store. The error
// names the key and a key id, never the value.
func ResealLogin(key string, b []byte, from, to *state.Sealer, toFiles bool) ([]byte, error) {
	if !IsLoginKey(key) {
		return nil, fmt.Errorf("%q is not the key of a login", key)
	}
	plain, err := openLogin(key, b, from, true)
	if err != nil {
		return nil, fmt.Errorf("login %s: %w", key, err)
	}
	if !json.Valid(plain) {
		return nil, fmt.Errorf("login %s is not valid JSON", key)
	}
	if to != nil {
		return to.Seal(key, plain), nil
	}
	if !toFiles {
		return nil, fmt.Errorf("login %s: %w", key, errPlainShared)
	}
	return plain, nil
}

// NewSealer returns the sealer of the [state] table s: nil when it has
// no encryption key (logins are then kept plain, on the files engine
// only).
func NewSealer(s configs.State) (*state.Sealer, error) {
	if len(s.EncryptionKey) == 0 {
		return nil, nil
	}
	sl, err := state.NewSealer(s.EncryptionKey, s.OldEncryptionKeys...)
	if err != nil {
		return nil, fmt.Errorf("state.encryption_key: %w", err)
	}
	return sl, nil
}

// get returns the document of the store key name; nil when there is none.
func (s Store) get(ctx context.Context, name string) ([]byte, error) {
	b, err := s.store().Get(ctx, DocKey(name))
	if err != nil {
		return nil, fmt.Errorf("login %s: %w", DocKey(name), err)
	}
	return b, nil
}

// Load returns the record of the store key name and the document it was
// read from; nil (and no error) when there is none.
func (s Store) Load(ctx context.Context, name string) (*Record, []byte, error) {
	b, err := s.get(ctx, name)
	if err != nil || b == nil {
		return nil, nil, err
	}
	r, err := s.decode(name, b)
	if err != nil {
		return nil, nil, err
	}
	return r, b, nil
}

// Save replaces the record of r.Upstream (and r.User), atomically, and
// returns the document written.
func (s Store) Save(ctx context.Context, r *Record) ([]byte, error) {
	b, err := s.encode(r)
	if err != nil {
		return nil, err
	}
	err = s.store().Update(ctx, DocKey(r.key()), func([]byte) ([]byte, error) { return b, nil })
	if err != nil {
		return nil, fmt.Errorf("login %s: %w", DocKey(r.key()), err)
	}
	return b, nil
}

// Delete removes the record of the store key name; a missing one is no
// error. removed says whether there was one.
func (s Store) Delete(ctx context.Context, name string) (removed bool, err error) {
	removed, err = s.store().Delete(ctx, DocKey(name))
	if err != nil {
		return false, fmt.Errorf("login %s: %w", DocKey(name), err)
	}
	return removed, nil
}

// refreshLockTTL is how long a replica may hold a login's refresh lock
// before it lapses (its holder died). It outlasts the token request,
// which the client's own timeout (30 seconds by default) cuts, and the
// save after it, so that a slow authorization server cannot make the
// lock lapse under a live refresh and let a second replica refresh too.
const refreshLockTTL = 45 * time.Second

// lockRefresh takes the lock under which the login of the store key name
// is refreshed: one replica refreshes at a time.
func (s Store) lockRefresh(ctx context.Context, name string) (func(), error) {
	unlock, err := s.store().Lock(ctx, "oauth-refresh-"+name, refreshLockTTL)
	if err != nil {
		return nil, fmt.Errorf("login %s: the refresh lock: %w", DocKey(name), err)
	}
	return unlock, nil
}

// Users returns the UserKeys of the users of upstream name with a login
// in the store, the most recently written first. The slice is the
// caller's.
func (s Store) Users(ctx context.Context, name string) ([]string, error) {
	prefix := "oauth-" + name + ".user-"
	entries, err := s.store().List(ctx, prefix)
	if errors.Is(err, statedir.ErrNoDir) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("logins of upstream %q: %w", name, err)
	}
	var keys []string
	for _, e := range entries {
		k, ok := strings.CutSuffix(strings.TrimPrefix(e.Key, prefix), ".json")
		if !ok || len(k) != 2*sha256.Size || strings.Trim(k, "0123456789abcdef") != "" {
			continue
		}
		keys = append(keys, k)
	}
	return keys, nil
}
