package main

import (
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// linkVersion and linkCommit may be set at link time by `make build`, the
// release build and the container images (-ldflags "-X
// main.linkVersion=v1.2.3 -X main.linkCommit=<sha>"). linkVersion wins over
// the build info's module version; linkCommit is used when the build info
// records no commit (a build without VCS data: a container build context
// without .git, or a git worktree, whose .git file Go does not read).
var linkVersion, linkCommit string

// buildInfo is what `viewmux version` reports.
type buildInfo struct {
	version  string // v1.2.3, a pseudo-version, or "devel"
	commit   string // full revision; "" = not recorded
	time     string // commit time, RFC 3339; "" = not recorded
	modified bool   // built from a tree with uncommitted changes
	goVer    string // go1.26.8
	platform string // linux/amd64
}

// pseudoVersion matches the tail of a Go pseudo-version:
// …-20261122183000-c54cf60abcde, optionally +incompatible or +dirty.
var pseudoVersion = regexp.MustCompile(`[.-](\d{14})-([0-9a-f]{12})(\+\w+)?$`)

// readBuildInfo interprets the build info of this binary (ok false: none,
// as for a binary built without module support). `go install …@v1.2.3`
// records the module version and no VCS settings; `go build` in a checkout
// records vcs.revision, vcs.time and vcs.modified, and (since Go 1.24) a
// pseudo-version or tag as the module version; `go run` and tests record
// "(devel)".
func readBuildInfo(bi *debug.BuildInfo, ok bool, link string) buildInfo {
	info := buildInfo{version: "devel", goVer: runtime.Version(), platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok {
		if link != "" {
			info.version = link
		}
		return info
	}
	if bi.GoVersion != "" {
		info.goVer = bi.GoVersion
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.version = v
	}
	if link != "" {
		info.version = link
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.commit = s.Value
		case "vcs.time":
			info.time = s.Value
		case "vcs.modified":
			info.modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		info.platform = goos + "/" + goarch
	}
	// A module version installed without VCS settings still names its
	// commit when it is a pseudo-version.
	if m := pseudoVersion.FindStringSubmatch(bi.Main.Version); m != nil && info.commit == "" {
		info.commit = m[2]
		if t := m[1]; info.time == "" {
			info.time = fmt.Sprintf("%s-%s-%sT%s:%s:%sZ", t[0:4], t[4:6], t[6:8], t[8:10], t[10:12], t[12:14])
		}
		info.modified = info.modified || m[3] == "+dirty"
	}
	return info
}

// String is the text `viewmux version` prints.
func (b buildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "viewmux %s\n", b.version)
	switch {
	case b.commit == "":
		s.WriteString("commit not recorded in this build\n")
	default:
		s.WriteString("commit " + b.commit)
		var notes []string
		if b.time != "" {
			notes = append(notes, b.time)
		}
		if b.modified {
			notes = append(notes, "with uncommitted changes")
		}
		if len(notes) > 0 {
			s.WriteString(" (" + strings.Join(notes, ", ") + ")")
		}
		s.WriteString("\n")
	}
	fmt.Fprintf(&s, "%s %s\n", b.goVer, b.platform)
	return s.String()
}

// currentBuildInfo is this binary's buildInfo, link-time values included.
func currentBuildInfo() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	info := readBuildInfo(bi, ok, linkVersion)
	if info.commit == "" && linkCommit != "" {
		info.commit = linkCommit
	}
	return info
}

// version is this binary's version, for serverInfo and clientInfo.
func version() string { return currentBuildInfo().version }

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	if err := newFlags("version", stdout).parse(args); err != nil {
		return err
	}
	fmt.Fprint(stdout, currentBuildInfo())
	return nil
}
