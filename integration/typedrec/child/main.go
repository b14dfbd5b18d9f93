// Command child serves typedrec's typed upstream over stdio, for the
// adversarial tests' stdio upstream. Each tool run is appended as one JSON
// line (a typedrec.Exec) to the file named by $TYPEDREC_LOG, and written
// before the tool answers, so a test that has the answer can read the run.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/integration/typedrec"
)

func main() {
	path := os.Getenv("TYPEDREC_LOG")
	if path == "" {
		fmt.Fprintln(os.Stderr, "typedrec child: TYPEDREC_LOG is not set")
		os.Exit(2)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "typedrec child:", err)
		os.Exit(1)
	}
	defer f.Close()
	var mu sync.Mutex
	record := func(e typedrec.Exec) {
		line, _ := json.Marshal(e) // strings only: cannot fail
		mu.Lock()
		defer mu.Unlock()
		// One write per line on an O_APPEND file: lines from several
		// children sharing the file do not interleave.
		if _, err := f.Write(append(line, '\n')); err != nil {
			fmt.Fprintln(os.Stderr, "typedrec child:", err)
			os.Exit(1)
		}
	}
	if err := server.ServeStdio(typedrec.New("typedrec-stdio", record)); err != nil {
		fmt.Fprintln(os.Stderr, "typedrec child:", err)
		os.Exit(1)
	}
}
