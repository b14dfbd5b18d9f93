package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/redact"
)

// logFlags are a command's --log-level and --log-format flags.
type logFlags struct {
	level  *string
	format *string // "" = server.log_format, else text
}

// addLogFlags defines --log-level (defaulting to level) and --log-format.
func addLogFlags(f *flags, level string) logFlags {
	return logFlags{
		level:  f.String("log-level", level, "log `LEVEL`: debug, info, warn or error"),
		format: f.String("log-format", "", "log `FORMAT`: text or json (default: server.log_format, else text)"),
	}
}

// check validates the flags, before any config is read.
func (l logFlags) check(f *flags) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*l.level)); err != nil {
		return f.usageErr(fmt.Errorf("--log-level %q: want debug, info, warn or error", *l.level))
	}
	switch *l.format {
	case "", "text", "json":
		return nil
	}
	return f.usageErr(fmt.Errorf("--log-format %q: want text or json", *l.format))
}

// masked returns the logger writing to w at the flag's level, in the
// flag's format or else configFormat ("" = text), with every value
// secrets holds masked in every record (nil: URLs are redacted, no value
// is masked). Call check first.
func (l logFlags) masked(w io.Writer, configFormat string, secrets *redact.Live) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(*l.level)) // checked by check
	format := *l.format
	if format == "" {
		format = configFormat
	}
	return newLogger(w, lv, format, secrets)
}

// open finds and loads the config as openConfig does, then returns the
// logger for it (its format may come from the config) with where the config
// came from already logged: how every command that reads a config starts.
// The logger masks every configured secret value of the config
// (configs.Config.SecretValues), whoever's, in every record: the returned
// Live holds that set, for the aggregator to replace at a reload
// (aggregator.Options.Secrets).
func (l logFlags) open(flagPath string, src configSource, w io.Writer) (configSource, *configs.Config, *slog.Logger, *redact.Live, error) {
	src, cfg, err := openConfig(flagPath, src)
	if err != nil {
		return src, nil, nil, nil, err
	}
	secrets := redact.NewLive(redact.NewSecrets(cfg.SecretValues()...))
	log := l.masked(w, cfg.Server.LogFormat, secrets)
	src.logLoaded(log, cfg)
	return src, cfg, log, secrets, nil
}

// newLogger returns a logger on w at level, as JSON lines when format is
// "json" and as logfmt-style text otherwise. Every record passes through
// the redaction handler first: upstream URLs may carry secrets in their
// queries, and library lines (mcp-go's HTTP errors) are redacted too. With
// secrets, every value it holds now is masked as well.
func newLogger(w io.Writer, level slog.Level, format string, secrets *redact.Live) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	if secrets != nil {
		return slog.New(redact.NewHandlerFunc(h, secrets.Apply))
	}
	return slog.New(redact.NewHandler(h))
}
