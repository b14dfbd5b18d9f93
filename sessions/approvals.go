package sessions

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file holds the approvals of 2026-07-28 (stateless) clients
// (approve.go), which may send each request to another replica. Nothing of
// such an approval stays in a replica's memory: the question is answered
// input_required at once, and what the answer will allow (the tool, its
// upstream, a digest of the arguments, the caller, the profile and its
// rules, when it was asked) is kept in the state store under a random id,
// which the signed requestState names. The retry, on any replica, takes
// that record exactly once (state.Once.TakeOnce) and, when it names the
// same call and the answer is yes, forwards the call it carries: a
// replayed answer finds nothing and runs nothing. While the store does
// not answer, an approval can be neither asked nor answered: the call is
// refused with a clear error, and nothing is forwarded.
//
// A legacy upstream's own request for input in the middle of a call is
// another matter: it lives with the upstream's connection, in one replica
// (heldCalls, call.go).

// approvalStatePrefix marks the requestState of a stateless approval
// (heldCalls' are requestStatePrefix).
const approvalStatePrefix = "viewmux2."

// approvalNS is the store's namespace of stateless approvals.
const approvalNS = "approvals"

// approvalKeyDoc is the store's document holding the key that signs the
// requestState of stateless approvals, shared by every replica on the
// store: written once, by the first replica that needs it, as 64 hex
// digits. It signs only; whoever can read the store can also write the
// records it guards.
const approvalKeyDoc = "requeststate.key"

// approvals are the stateless approvals waiting for their retry. It is
// safe for concurrent use.
type approvals struct {
	store  state.Store
	limits state.Limits
	// shared: the store is shared by replicas, which share its signing
	// key. On the files engine the records are this process's memory,
	// and so is the key.
	shared bool

	mu  sync.Mutex
	key []byte // the signing key, once read or made
}

// newApprovals returns the stateless approvals kept in st, each caller
// holding at most perCaller of them (0: heldShare); as held calls, at
// most heldMax in all, for heldWait each.
func newApprovals(st state.Store, perCaller int) *approvals {
	if perCaller <= 0 {
		perCaller = heldShare
	}
	a := &approvals{store: st, shared: st.Engine() != "files",
		limits: state.Limits{TTL: heldWait, Max: heldMax, PerOwner: perCaller}}
	if !a.shared {
		a.key = make([]byte, 32)
		rand.Read(a.key)
	}
	return a
}

// approvalRecord is what an approval's answer allows, as kept in the
// store. It holds no token and no argument: the caller and rules only as
// hashes, the arguments as their digest.
type approvalRecord struct {
	Tool     string `json:"tool"`     // the exposed name
	Upstream string `json:"upstream"` // which serves it
	Args     string `json:"args"`     // argumentsDigest
	Caller   string `json:"caller"`   // hashOf(Binding.Who)
	Profile  string `json:"profile"`
	Rules    string `json:"rules"` // hashOf(the filter's key)
	Asked    int64  `json:"asked"` // Unix milliseconds
}

func recordOf(b grant.Binding, e *filter.Entry, m *jsonrpc.Message, asked time.Time) approvalRecord {
	return approvalRecord{Tool: e.Tool.Name, Upstream: e.Upstream, Args: argumentsDigest(m.Arguments),
		Caller: hashOf(b.Who), Profile: b.Profile, Rules: hashOf(b.Filter.Key()), Asked: asked.UnixMilli()}
}

// sameCall reports whether r and o name the same call by the same caller
// through the same rules (Asked aside).
func (r approvalRecord) sameCall(o approvalRecord) bool {
	return r.Tool == o.Tool && r.Upstream == o.Upstream && r.Args == o.Args && r.Caller == o.Caller &&
		r.Profile == o.Profile && r.Rules == o.Rules
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// argumentsDigest is the digest of a call's arguments as the approval
// question showed them: compact JSON (whitespace between tokens means
// nothing), else the bytes as they are.
func argumentsDigest(args json.RawMessage) string {
	var buf bytes.Buffer
	if len(bytes.TrimSpace(args)) == 0 {
		buf.WriteString("{}")
	} else if json.Compact(&buf, args) != nil {
		buf.Reset()
		buf.Write(args)
	}
	return hashOf(buf.String())
}

// errApprovalStore is the refusal of an approval the store cannot keep.
func errApprovalStore(tool string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf(
		"tool %s needs a person's approval, and the state store that keeps approvals is unreachable: nothing was sent to the upstream; call the tool again when it is back", tool)}
}

// ask records the call m of e, which needs approval, and returns the
// requestState that names it.
func (a *approvals) ask(ctx context.Context, b grant.Binding, e *filter.Entry, m *jsonrpc.Message) (string, *jsonrpc.Error) {
	key, err := a.signingKey(ctx)
	if err != nil {
		return "", errApprovalStore(e.Tool.Name)
	}
	val, err := json.Marshal(recordOf(b, e, m, time.Now()))
	if err != nil {
		return "", &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: "internal error"}
	}
	id := state.NewKey()
	switch err := a.store.PutOnce(ctx, approvalNS, hashOf(b.Who), id, val, a.limits); {
	case errors.Is(err, state.ErrFull):
		return "", &jsonrpc.Error{Code: errBusyCode, Message: fmt.Sprintf(
			"tool %s needs a person's approval, and too many calls (%d) are waiting for one: nothing was sent to the upstream; retry in a few minutes", e.Tool.Name, a.limits.Max)}
	case err != nil:
		return "", errApprovalStore(e.Tool.Name)
	}
	return approvalStatePrefix + id + "." + base64.RawURLEncoding.EncodeToString(sign(key, id)), nil
}

func sign(key []byte, id string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(approvalStatePrefix + id))
	return mac.Sum(nil)
}

// take spends the approval reqState names, for the call m of e, and
// returns when it was asked. Of any number of retries carrying one
// requestState, on any replicas, one takes it; the others are refused,
// and so is a retry of another call than the one asked about (which
// spends it).
func (a *approvals) take(ctx context.Context, reqState string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message) (time.Time, *jsonrpc.Error) {
	id, sig, ok := strings.Cut(strings.TrimPrefix(reqState, approvalStatePrefix), ".")
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || len(id) > 64 {
		return time.Time{}, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "requestState is malformed: call the tool again without it"}
	}
	key, err := a.signingKey(ctx)
	if err != nil {
		return time.Time{}, errApprovalStore(e.Tool.Name)
	}
	if !hmac.Equal(got, sign(key, id)) {
		return time.Time{}, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "requestState was not minted by this viewmux fleet: call the tool again without it"}
	}
	val, _, found, err := a.store.TakeOnce(ctx, approvalNS, id)
	if err != nil {
		return time.Time{}, errApprovalStore(e.Tool.Name)
	}
	var rec approvalRecord
	if !found || json.Unmarshal(val, &rec) != nil {
		return time.Time{}, &jsonrpc.Error{Code: mcp.INVALID_PARAMS,
			Message: "requestState names an approval that was answered already, or expired: call the tool again without it"}
	}
	if !rec.sameCall(recordOf(b, e, m, time.Time{})) {
		return time.Time{}, &jsonrpc.Error{Code: mcp.INVALID_PARAMS,
			Message: "requestState belongs to another request: retry the same request, with the same arguments, profile and credentials"}
	}
	return time.UnixMilli(rec.Asked), nil
}

// signingKey returns the key that signs requestState: this process's on
// the files engine, else the fleet's, read from the store (or written
// there, by the first replica) once.
func (a *approvals) signingKey(ctx context.Context) ([]byte, error) {
	a.mu.Lock()
	key := a.key
	a.mu.Unlock()
	if key != nil {
		return key, nil
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	err := a.store.Update(ctx, approvalKeyDoc, func(cur []byte) ([]byte, error) {
		if k, err := hex.DecodeString(string(bytes.TrimSpace(cur))); err == nil && len(k) == 32 {
			key = k
			return nil, state.ErrUnchanged
		}
		key = fresh // none yet (or not a key): every replica ends up with the one written
		return []byte(hex.EncodeToString(fresh)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("requestState signing key: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.key == nil {
		a.key = key
	}
	return a.key, nil
}

// approvalRetry returns the requestState and the answer a 2026-07-28
// request's params carry when they answer one of viewmux's approval
// questions; ok is false otherwise.
func approvalRetry(params json.RawMessage) (reqState string, answer json.RawMessage, ok bool) {
	var p struct {
		RequestState   string                     `json:"requestState"`
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
	}
	if json.Unmarshal(params, &p) != nil || !strings.HasPrefix(p.RequestState, approvalStatePrefix) {
		return "", nil, false
	}
	return p.RequestState, p.InputResponses[inputKey], true
}

// withoutRetry returns a retry's params without the requestState and
// inputResponses that answered viewmux's question, which are viewmux's
// and not the upstream's; every other member keeps its bytes and order.
// Keys are matched as approvalRetry's decoder matches them, without
// regard to case.
func withoutRetry(params json.RawMessage) json.RawMessage {
	return jsonrpc.Edit(params, func(k string, v []byte) []byte {
		if strings.EqualFold(k, "requestState") || strings.EqualFold(k, "inputResponses") {
			return nil
		}
		return v
	})
}
