package sessions

import (
	"encoding/json"
	"io"
	"time"

	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// auditLimit records a request refused by a size, busy or session limit
// before any tool decision was made: the audit log must show what a client
// was refused, not only what the filter decided. method and tool are "" when
// the refused message could not be read.
func (s *Server) auditLimit(session, profile, method, tool, reason string) {
	s.audit.Write(audit.Record{
		Time: time.Now().UTC(), Session: session, Profile: profile, Method: method,
		Tool: jsonrpc.Printable(tool), Decision: audit.Denied, Reason: reason,
	}, nil)
}

// errorFrame encodes a JSON-RPC error answer of viewmux's own.
func errorFrame(id json.RawMessage, code int, msg string) []byte {
	return jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: code, Message: msg})
}

// rateLimited is the JSON-RPC error code of a call refused by a rate limit:
// an implementation-defined server error.
const rateLimited = -32029

// writeList writes a tools/list answer from the view's pre-encoded listing,
// in pieces, so that nothing the size of the listing is allocated per
// request.
func writeList(w io.Writer, id json.RawMessage, v *filter.View) error {
	for _, part := range [][]byte{[]byte(`{"jsonrpc":"2.0","id":`), id, []byte(`,"result":`), v.Encoded(), []byte("}\n")} {
		if _, err := w.Write(part); err != nil {
			return err
		}
	}
	return nil
}
