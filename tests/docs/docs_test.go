// Package docs checks the repository's Markdown documents as a reader
// meets them: the README stays a landing page, every link leads to a file
// (and heading) inside the repository, every repository path the prose
// names exists, the internals list every failpoint, and the decisions are
// numbered once each and indexed.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// maxReadmeLines keeps README.md a landing page; detail belongs in docs/.
const maxReadmeLines = 300

// skipDirs are never walked: VCS data, installed packages, run output.
var skipDirs = map[string]bool{".git": true, "node_modules": true, ".run": true, "bin": true}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional "title".
	inlineLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan matches a code span of any backtick run length.
	codeSpan = regexp.MustCompile("(`+)[^`](?:.*?[^`])?(`+)")
	// scheme matches a target that leaves the repository (https:, mailto:…).
	scheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// spanText matches the text of a single-backtick code span.
	spanText = regexp.MustCompile("`([^`]+)`")
	// repoPath matches a code span that names a file or directory of the
	// repository, by its top-level directory.
	repoPath = regexp.MustCompile(`^(?:bench|client|deliver|deploy|docs|gate|logic|migrations|pkg|proto|sdk|tests)/[\w.@/-]*$`)
	// injected matches a failpoint in the code; its name (deliver/job/drop)
	// looks like a path but is not one.
	injected = regexp.MustCompile(`failpoint\.Inject\("([^"]+)"`)
)

// history names the documents that record the past: a decision or a
// recorded benchmark run may name a file that has since moved.
func history(rel string) bool {
	rel = filepath.ToSlash(rel)
	return rel == "docs/decisions.md" || strings.HasPrefix(rel, "bench/results/")
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// filesEnding returns every file of the repository whose name ends in
// suffix, relative to root.
func filesEnding(t *testing.T, root, suffix string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), suffix) {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// markdownFiles returns every .md file of the repository, relative to root.
func markdownFiles(t *testing.T, root string) []string {
	return filesEnding(t, root, ".md")
}

// unfenced returns the lines of a Markdown text, those of fenced code
// blocks (and their fences) blank: code is neither links nor headings.
func unfenced(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			lines[i] = ""
		}
	}
	return lines
}

// prose returns the lines of a Markdown text outside fenced code blocks,
// with code spans removed: links inside code are not links.
func prose(text string) []string {
	lines := unfenced(text)
	for i, line := range lines {
		lines[i] = codeSpan.ReplaceAllString(line, "")
	}
	return lines
}

// anchors returns the heading anchors GitHub gives a Markdown text:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func anchors(text string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for _, line := range unfenced(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			set[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			set[slug] = true
		}
		seen[slug]++
	}
	return set
}

func TestReadmeIsALandingPage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move detail to docs/", n, maxReadmeLines)
	}
}

// Every link of every Markdown file resolves inside the repository: the
// file or directory exists, a #fragment names one of the target's
// headings, and no link leaves the repository.
func TestMarkdownLinksStayInTheRepository(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no Markdown files found")
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := cache[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cache[path] = anchors(string(b))
		return cache[path]
	}
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range prose(string(b)) {
			for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				where := fmt.Sprintf("%s:%d: link %q", rel, i+1, target)
				if scheme.MatchString(target) {
					t.Errorf("%s leaves the repository", where)
					continue
				}
				path, fragment, _ := strings.Cut(target, "#")
				full := filepath.Join(root, rel)
				if path != "" {
					full = filepath.Join(filepath.Dir(full), filepath.FromSlash(path))
				}
				if r, err := filepath.Rel(root, full); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
					t.Errorf("%s leaves the repository", where)
					continue
				}
				if _, err := os.Stat(full); err != nil {
					t.Errorf("%s: no such file", where)
					continue
				}
				if fragment != "" && strings.HasSuffix(full, ".md") && !anchorsOf(full)[fragment] {
					t.Errorf("%s: no heading with anchor #%s", where, fragment)
				}
			}
		}
	}
}

// failpoints returns the names of the failpoints the Go sources (not
// their tests) inject.
func failpoints(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, rel := range filesEnding(t, root, ".go") {
		if strings.HasSuffix(rel, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range injected.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("no failpoint found in the sources: the pattern is broken")
	}
	return names
}

// Every file or directory a document names in a code span
// (`deploy/dev/services.sh`, `logic/internal/clientwire`) exists, so a
// reader who follows the prose, not only its links, finds what it names.
// Paths are from the repository root; a trailing :line, #anchor or /...
// is ignored, and failpoint names are not paths.
func TestNamedPathsExist(t *testing.T) {
	root := repoRoot(t)
	fps := failpoints(t, root)
	checked := 0
	for _, rel := range markdownFiles(t, root) {
		if history(rel) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range unfenced(string(b)) {
			for _, m := range spanText.FindAllStringSubmatch(line, -1) {
				name := strings.TrimRight(m[1], ".,;")
				if j := strings.IndexAny(name, ":#"); j >= 0 {
					name = name[:j]
				}
				name = strings.TrimSuffix(name, "/...")
				if !repoPath.MatchString(name) || fps[name] {
					continue
				}
				checked++
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err != nil {
					t.Errorf("%s:%d: %q names no file or directory of the repository", rel, i+1, m[1])
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no repository path found in any document: the pattern is broken")
	}
}

// The failpoint table of docs/internals.md lists every failpoint the
// sources inject, and only those: it is where a test author finds the
// seams (it once listed 6 of 8).
func TestInternalsListsEveryFailpoint(t *testing.T) {
	root := repoRoot(t)
	want := failpoints(t, root)
	b, err := os.ReadFile(filepath.Join(root, "docs", "internals.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	listed := map[string]bool{}
	in := false
	for _, line := range unfenced(string(b)) {
		if m := heading.FindStringSubmatch(line); m != nil {
			in = strings.HasPrefix(m[1], "Failpoints")
			continue
		}
		if m := row.FindStringSubmatch(line); in && m != nil {
			listed[m[1]] = true
		}
	}
	if len(listed) == 0 {
		t.Fatal("docs/internals.md has no failpoint table under a Failpoints heading")
	}
	for name := range want {
		if !listed[name] {
			t.Errorf("failpoint %s is injected but not listed in docs/internals.md", name)
		}
	}
	for name := range listed {
		if !want[name] {
			t.Errorf("docs/internals.md lists failpoint %s, which no source injects", name)
		}
	}
}

// docs/decisions.md is numbered 1..N, each number once, and its index has
// one row per decision in order; a status is "in force", "amended by" or
// "replaced by" later decisions that exist.
func TestDecisionsIndexed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "decisions.md"))
	if err != nil {
		t.Fatal(err)
	}
	decision := regexp.MustCompile(`^(\d+)\. \*\*`)
	row := regexp.MustCompile(`^\| (\d+) \| (.+) \| (.+) \|$`)
	status := regexp.MustCompile(`^(?:in force|(?:amended|replaced) by .+)$`)
	later := regexp.MustCompile(`\b(\d+)\b`)
	note := regexp.MustCompile(`\([^)]*\)`)
	seen := map[int]int{} // decision number → line
	var rows []int
	statuses := map[int]string{}
	for i, line := range unfenced(string(b)) {
		if m := decision.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			if prev, ok := seen[n]; ok {
				t.Errorf("decisions.md:%d: decision %d again (first at line %d)", i+1, n, prev)
			}
			seen[n] = i + 1
		}
		if m := row.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			rows = append(rows, n)
			statuses[n] = m[3]
		}
	}
	if len(seen) == 0 {
		t.Fatal("no decision found: the pattern is broken")
	}
	for n := 1; n <= len(seen); n++ {
		if _, ok := seen[n]; !ok {
			t.Errorf("decision %d is missing: numbers are not 1..%d", n, len(seen))
		}
	}
	for i, n := range rows {
		if n != i+1 {
			t.Errorf("index row %d is decision %d: one row per decision, in order", i+1, n)
			break
		}
	}
	if len(rows) != len(seen) {
		t.Errorf("the index has %d rows for %d decisions", len(rows), len(seen))
	}
	for n, s := range statuses {
		if !status.MatchString(s) {
			t.Errorf("index row %d: status %q is not in force / amended by N / replaced by N", n, s)
			continue
		}
		// The numbers outside the parenthesised notes name decisions.
		for _, m := range later.FindAllString(note.ReplaceAllString(s, ""), -1) {
			k, _ := strconv.Atoi(m)
			if _, ok := seen[k]; !ok || k <= n {
				t.Errorf("index row %d: %q names decision %d, which is not a later decision", n, s, k)
			}
		}
	}
}
