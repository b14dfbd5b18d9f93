//go:build unix

package itest

import (
	"encoding/json"
	"fmt"
	"testing"
)

// End-to-end tests of the front doors other than /mcp: the
// official TypeScript SDK client over legacy SSE, websocket and stdio,
// against the real viewmux binary, must see exactly what it sees over
// streamable HTTP, with the same gate.

// DoorScript is a Script for any front door: drive.mjs's "transport" and,
// for stdio, the command it spawns (see the header of client/drive.mjs).
type DoorScript struct {
	Script
	Transport string            `json:"transport,omitempty"` // http (default), sse, ws, stdio
	Command   string            `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

// DoorResult is drive.mjs's output for a DoorScript.
type DoorResult struct {
	OK      bool         `json:"ok"`
	Clients []DoorClient `json:"clients"`
}

// DoorClient is one client's outcome; Exit is set for stdio.
type DoorClient struct {
	ClientResult
	Exit *struct {
		Code         *int    `json:"code"`
		Signal       *string `json:"signal"`
		AfterCloseMs *int    `json:"afterCloseMs"`
	} `json:"exit"`
}

// DriveDoor runs script with client/drive.mjs, failing the test on any
// unexpected outcome (as drive does).
func DriveDoor(t *testing.T, script DoorScript) DoorResult {
	t.Helper()
	RequireNode(t)
	in, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, runErr := RunNodeScript(t, "drive.mjs", in)
	var res DoorResult
	decodeErr := json.Unmarshal(stdout, &res)
	if runErr != nil || decodeErr != nil || !res.OK {
		t.Fatalf("drive.mjs (%s %s%s): run: %v, decode: %v\n--- driver stderr ---\n%s--- driver stdout ---\n%s",
			script.Transport, script.URL, script.Command, runErr, decodeErr, stderr, stdout)
	}
	return res
}

// DoorsConfig mounts the demo server, required (so /readyz means its tools
// are in), with a read-only profile.
func DoorsConfig(t *testing.T) string {
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.demo]
command = %s
args = ["demo-server", "--name", "demo"]
required = true

[profiles.readonly]
read_only = true
`, TomlString(MuxBinary(t)))
}

// Door is one way in, for one profile.
type Door struct {
	Name   string
	Script func(steps []Op) DoorScript
}

// DoorsFor returns the doors that serve profile ("" = none named) on mux,
// and for stdio, with the config at CfgPath and marker in its environment.
func DoorsFor(mux *Mux, cfgPath, marker, profile string) []Door {
	q := ""
	if profile != "" {
		q = "?profile=" + profile
	}
	stdioArgs := []string{"serve", "--stdio", "--config", cfgPath}
	if profile != "" {
		stdioArgs = append(stdioArgs, "--profile", profile)
	}
	doors := []Door{
		{"sse query", func(steps []Op) DoorScript {
			return DoorScript{Transport: "sse", Script: Script{URL: "http://" + mux.Addr + "/sse" + q, Steps: steps}}
		}},
		{"ws query", func(steps []Op) DoorScript {
			return DoorScript{Transport: "ws", Script: Script{URL: "ws://" + mux.Addr + "/ws" + q, Steps: steps}}
		}},
		{"stdio", func(steps []Op) DoorScript {
			return DoorScript{Transport: "stdio", Command: Harness.Mux, Args: stdioArgs,
				Env: map[string]string{MarkerEnv: marker}, Script: Script{Steps: steps}}
		}},
	}
	if profile != "" {
		doors = append(doors, Door{"sse header", func(steps []Op) DoorScript {
			return DoorScript{Transport: "sse", Script: Script{URL: "http://" + mux.Addr + "/sse",
				Headers: map[string]string{"Mcp-Profile": profile}, Steps: steps}}
		}})
	}
	return doors
}

// CheckStdioExit asserts the stdio server exited 0 by itself once its
// stdin closed (the SDK only signals it after 2s).
func CheckStdioExit(t *testing.T, c DoorClient) {
	t.Helper()
	e := c.Exit
	if e == nil || e.Code == nil || *e.Code != 0 || e.Signal != nil || e.AfterCloseMs == nil || *e.AfterCloseMs >= 2000 {
		t.Errorf("stdio server exit = %+v, want code 0, no signal, within 2s of stdin closing", e)
	}
}
