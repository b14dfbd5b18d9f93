package configs

import (
	"fmt"
	"strings"
)

// expand replaces ${NAME} with the value of the environment variable NAME and
// ${NAME:-default} with its value, or default when it is unset or empty. $$ is
// a literal $. The default is taken literally up to the first }.
//
// A $ directly before a letter or underscore ($HOME) is an error rather than
// silently literal: it is almost always a forgotten pair of braces. Any other
// lone $ is literal.
//
// expand reports every unset variable of s in one error, which names them but
// never includes any variable's value.
func expand(s string, lookupEnv func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var (
		b     strings.Builder
		unset []string
	)
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' {
			b.WriteByte(c)
			i++
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '$':
			b.WriteByte('$')
			i += 2
		case i+1 < len(s) && s[i+1] == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q", s)
			}
			ref := s[i+2 : i+end]
			name, def, hasDefault := strings.Cut(ref, ":-")
			if !isEnvName(name) {
				return "", fmt.Errorf("invalid variable reference ${%s} (want ${NAME} or ${NAME:-default}; $$ is a literal $)", ref)
			}
			val, ok := lookupEnv(name)
			switch {
			case hasDefault && val == "":
				val = def
			case !ok:
				unset = append(unset, name)
			}
			b.WriteString(val)
			i += end + 1
		case i+1 < len(s) && isEnvStart(s[i+1]):
			j := i + 1
			for j < len(s) && isEnvByte(s[j]) {
				j++
			}
			return "", fmt.Errorf("$%s is not expanded: write ${%[1]s} to use the variable or $$%[1]s for a literal $", s[i+1:j])
		default:
			b.WriteByte('$')
			i++
		}
	}
	switch len(unset) {
	case 0:
		return b.String(), nil
	case 1:
		return "", fmt.Errorf("environment variable %s is not set (use ${%[1]s:-default} for a fallback)", unset[0])
	default:
		return "", fmt.Errorf("environment variables %s are not set", strings.Join(unset, ", "))
	}
}

func isEnvName(s string) bool {
	if s == "" || !isEnvStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isEnvByte(s[i]) {
			return false
		}
	}
	return true
}

func isEnvStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isEnvByte(c byte) bool { return isEnvStart(c) || c >= '0' && c <= '9' }
