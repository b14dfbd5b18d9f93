package door

import (
	"bufio"
	"slices"
	"strings"
	"testing"
)

func TestIDScanner(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"number first", `{"id":42,"method":"x","params":{}}`, `42`},
		{"string last, after big params", `{"method":"tools/call","params":{"id":1,"a":[{"id":2}],"s":"\"id\":3"},"jsonrpc":"2.0","id":"req-9"}`, `"req-9"`},
		{"spaces", "{ \"id\" :\t-7 , \"x\":1}", `-7`},
		{"no id", `{"method":"notifications/x","params":{"id":5}}`, ``},
		{"null id", `{"id":null,"method":"x"}`, ``},
		{"object id is not an id", `{"id":{"a":1},"method":"x"}`, ``},
		{"escaped key", `{"\u0069d":5}`, ``},
		{"longer key", `{"idx":5}`, ``},
		{"truncated", `{"method":"x","id":12`, ``},
		{"not an object", `[{"id":1}]`, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sc idScanner
			// Byte by byte: the scanner must not depend on write boundaries.
			for i := range len(tt.in) {
				sc.Write([]byte{tt.in[i]})
			}
			if got := string(sc.result()); got != tt.want {
				t.Fatalf("id = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadLine(t *testing.T) {
	big := `{"jsonrpc":"2.0","method":"x","params":{"p":"` + strings.Repeat("a", 200) + `"},"id":77}`
	in := "short\r\n" + big + "\n\n" + "last-no-newline"
	br := bufio.NewReaderSize(strings.NewReader(in), 16) // lines cross the buffer
	type out struct {
		line string
		id   string
		over bool
	}
	var got []out
	for {
		line, id, over, err := ReadLine(br, 100)
		if err != nil {
			break
		}
		got = append(got, out{string(line), string(id), over})
	}
	want := []out{{"short", "", false}, {"", "77", true}, {"", "", false}, {"last-no-newline", "", false}}
	if !slices.Equal(got, want) {
		t.Fatalf("lines = %+v, want %+v", got, want)
	}
}
