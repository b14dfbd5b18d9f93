package state_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/internal/state"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestSealer(t *testing.T) {
	s, err := state.NewSealer(key(1))
	if err != nil {
		t.Fatal(err)
	}
	token := []byte(`{"access_token":"gho_SECRETSECRET"}`)
	sealed := s.Seal("oauth-github.json", token)
	if bytes.Contains(sealed, []byte("SECRET")) || !state.IsSealed(sealed) {
		t.Fatalf("sealed value %q shows the token or is not marked sealed", sealed)
	}
	if !strings.Contains(string(sealed), s.ID()) {
		t.Errorf("sealed value %q does not carry its key id %s", sealed, s.ID())
	}
	if again := s.Seal("oauth-github.json", token); bytes.Equal(again, sealed) {
		t.Error("two seals of one value are equal: the nonce repeats")
	}
	got, err := s.Open("oauth-github.json", sealed)
	if err != nil || !bytes.Equal(got, token) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Moved under another document's key (another user's login): refused.
	if _, err := s.Open("oauth-github.user-abc.json", sealed); err == nil {
		t.Error("a value opened under another key")
	}
	// Tampered: refused.
	bad := bytes.Clone(sealed)
	bad[len(bad)-2] ^= 1
	if _, err := s.Open("oauth-github.json", bad); err == nil {
		t.Error("a tampered value opened")
	}
	// Another replica's key: ErrOtherKey, naming both ids, never the value.
	other, _ := state.NewSealer(key(2))
	_, err = other.Open("oauth-github.json", sealed)
	if !errors.Is(err, state.ErrOtherKey) || !strings.Contains(err.Error(), s.ID()) || !strings.Contains(err.Error(), other.ID()) {
		t.Errorf("Open with another key = %v; want ErrOtherKey naming both key ids", err)
	}
	// Rotation: the new key seals, the old one still opens.
	rotated, err := state.NewSealer(key(2), key(1))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Open("oauth-github.json", sealed); err != nil || !bytes.Equal(got, token) {
		t.Errorf("Open of an old key's value after rotation = %q, %v", got, err)
	}
	if rotated.ID() != other.ID() {
		t.Errorf("the rotated sealer seals with %s; want the new key's %s", rotated.ID(), other.ID())
	}
	if _, err := state.NewSealer(key(1)[:16]); err == nil {
		t.Error("a 16-byte key was accepted")
	}
}
