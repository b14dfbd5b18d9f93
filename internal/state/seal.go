package state

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Sealer seals values (login tokens) with AES-256-GCM before they reach a
// shared store. A sealed value is
//
//	vmx1.KEYID.BASE64URL(nonce ‖ ciphertext ‖ tag)
//
// KEYID names the key that sealed it (KeyID), so that a key can be
// rotated: the new key seals, the old ones still open. The additional
// data is the document's key, so a value copied under another key (one
// user's login under another user's name) does not open.
type Sealer struct {
	id   string
	aead map[string]cipher.AEAD // by key id; id's is the one that seals
}

// sealedPrefix starts every sealed value.
const sealedPrefix = "vmx1."

// NewSealer returns a sealer that seals with key and opens what key or
// any of old sealed. Each key is 32 bytes.
func NewSealer(key []byte, old ...[]byte) (*Sealer, error) {
	s := &Sealer{aead: map[string]cipher.AEAD{}}
	for i, k := range append([][]byte{key}, old...) {
		if len(k) != 32 {
			return nil, fmt.Errorf("state: encryption key %d: %d bytes, want 32 (64 hex characters)", i, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		id := KeyID(k)
		if i == 0 {
			s.id = id
		}
		if _, dup := s.aead[id]; !dup {
			s.aead[id] = aead
		}
	}
	return s, nil
}

// KeyID names a key without saying anything of it: the first 8 bytes of
// a hash of it, in hex.
func KeyID(key []byte) string {
	sum := sha256.Sum256(append([]byte("viewmux state key id\x00"), key...))
	return hex.EncodeToString(sum[:8])
}

// ID returns the id of the key that seals.
func (s *Sealer) ID() string { return s.id }

// Seal seals plain for the document key aad.
func (s *Sealer) Seal(aad string, plain []byte) []byte {
	aead := s.aead[s.id]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	rand.Read(nonce)
	ct := aead.Seal(nonce, nonce, plain, []byte(aad))
	return []byte(sealedPrefix + s.id + "." + base64.RawURLEncoding.EncodeToString(ct))
}

// ErrOtherKey is what Open fails with for a value sealed by a key this
// sealer does not have.
var ErrOtherKey = errors.New("sealed with another encryption key")

// IsSealed reports whether b is a sealed value.
func IsSealed(b []byte) bool { return strings.HasPrefix(string(b), sealedPrefix) }

// Open opens a value Seal sealed for aad. An error names the key id, never
// the value.
func (s *Sealer) Open(aad string, sealed []byte) ([]byte, error) {
	rest, ok := strings.CutPrefix(string(sealed), sealedPrefix)
	if !ok {
		return nil, errors.New("not a sealed value")
	}
	id, body, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, errors.New("sealed value without a key id")
	}
	aead := s.aead[id]
	if aead == nil {
		return nil, fmt.Errorf("%w (key id %s; this replica's is %s)", ErrOtherKey, id, s.id)
	}
	ct, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(ct) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("sealed value of key id %s is damaged", id)
	}
	plain, err := aead.Open(nil, ct[:aead.NonceSize()], ct[aead.NonceSize():], []byte(aad))
	if err != nil {
		return nil, fmt.Errorf("sealed value of key id %s does not open for %q: damaged, or moved from another key", id, aad)
	}
	return plain, nil
}
