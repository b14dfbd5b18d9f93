//go:build unix

package itest

// EverythingTools are the tools server-everything 2026.8.31 always registers
// (dist/tools/index.js registerTools). It also registers, after initialize,
// tools that depend on the client's capabilities (get-roots-list,
// trigger-*-request, simulate-research-query, …): tests do not count on those.
var EverythingTools = []string{
	"echo",
	"get-annotated-message",
	"get-env",
	"get-resource-links",
	"get-resource-reference",
	"get-structured-content",
	"get-sum",
	"get-tiny-image",
	"gzip-file-as-resource",
	"toggle-simulated-logging",
	"toggle-subscriber-updates",
	"trigger-long-running-operation",
}
