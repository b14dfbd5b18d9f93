package upstream

import "strings"

// attempt is one way of connecting that was tried, and how it failed.
type attempt struct {
	label string // how it was tried; "" for the first, plain attempt
	err   error
}

// attempts are the failed ways of connecting one dial tried, in order.
type attempts []attempt

// err returns one error that keeps each attempt's own: "label: error",
// joined by "; ". An attempt that failed with the same text as an earlier
// one is left out, so a fallback that hit the same wall does not repeat it;
// when only an unlabelled attempt is left, its error is returned as is.
func (as attempts) err() error {
	var kept attempts
	for _, a := range as {
		if !seenText(kept, a.err.Error()) {
			kept = append(kept, a)
		}
	}
	if len(kept) == 1 && kept[0].label == "" {
		return kept[0].err
	}
	return &attemptsError{kept}
}

// seenText reports whether an attempt in as failed with text.
func seenText(as attempts, text string) bool {
	for _, a := range as {
		if a.err.Error() == text {
			return true
		}
	}
	return false
}

// attemptsError is the error of a dial whose every attempt failed.
type attemptsError struct{ tried attempts }

func (e *attemptsError) Error() string {
	parts := make([]string, len(e.tried))
	for i, a := range e.tried {
		if a.label == "" {
			parts[i] = a.err.Error()
		} else {
			parts[i] = a.label + ": " + a.err.Error()
		}
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns each attempt's error, for errors.Is and errors.As.
func (e *attemptsError) Unwrap() []error {
	errs := make([]error, len(e.tried))
	for i, a := range e.tried {
		errs[i] = a.err
	}
	return errs
}

// maxRefusalBody bounds the bytes of a refusal's body kept for an error
// (streamable.go).
const maxRefusalBody = 200
