package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ReadEvent reads the next message of a text/event-stream body: the data
// of the next event whose type is "message" (or unnamed) with non-empty
// data. Comments, id, retry and other fields are skipped, as are events of
// other types (and priming events without data). A message over limit
// bytes is read to its end without being kept and returned as an
// oversize Frame carrying its id, like ReadMessage's. The stream ending,
// even in the middle of an event, is an error (io.EOF at a clean end).
func ReadEvent(r *bufio.Reader, limit int64) (Frame, error) {
	var (
		data      []byte
		s         idScanner
		over      bool
		haveData  bool
		event     []byte
		lineStart = true
		field     string // the field of the line being read
	)
	appendData := func(b []byte) {
		switch {
		case over:
			s.Feed(b)
		case int64(len(data))+int64(len(b)) > limit:
			over = true
			s.Feed(data)
			s.Feed(b)
			data = nil
		default:
			data = append(data, b...)
		}
	}
	for {
		chunk, err := r.ReadSlice('\n')
		end := err == nil
		if !end && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && (len(chunk) > 0 || !lineStart || haveData) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		body := chunk
		if end {
			body = bytes.TrimSuffix(body[:len(body)-1], []byte("\r"))
		}
		if !lineStart {
			if field == "data" {
				appendData(body)
			}
			lineStart = end
			continue
		}
		lineStart = end
		if end && len(body) == 0 { // a blank line ends the event
			typ := string(event)
			if haveData && (typ == "" || typ == "message") {
				if over {
					s.Feed([]byte{'\n'})
					return Frame{Oversize: true, ID: s.ID(), Method: s.hasMethod}, nil
				}
				if len(bytes.TrimSpace(data)) > 0 {
					return Frame{Data: data}, nil
				}
			}
			data, s, over, haveData, event = nil, idScanner{}, false, false, nil
			continue
		}
		name, value, found := bytes.Cut(body, []byte(":"))
		if !found {
			value = nil
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		field = string(name)
		switch field {
		case "data":
			if haveData {
				appendData([]byte{'\n'})
			}
			haveData = true
			appendData(value)
		case "event":
			event = append(event[:0], value...)
			if len(event) > 64 {
				event = event[:64]
			}
		}
	}
}
