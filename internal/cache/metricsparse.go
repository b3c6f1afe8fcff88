package cache

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// This file holds the scanner behind ParseMetrics: one pass over the text that reads
// only the lines of the families the mapping needs and assigns them to families the
// way the Prometheus text format (and its reference parser, expfmt.TextParser) does.

// familyType is what a family's TYPE line (or its first sample) made it.
type familyType uint8

const (
	typeUnset     familyType = iota // no TYPE line and no sample yet
	typeValue                       // counter, gauge or untyped: one value per sample line
	typeSummary                     // samples grouped by label set, _count and _sum joining
	typeHistogram                   // histogram or gauge histogram: likewise, with _bucket
)

// suffix tells a family's own samples from its _count, _sum and _bucket series.
type suffix uint8

const (
	suffixNone suffix = iota
	suffixCount
	suffixSum
	suffixBucket
)

// suffixes are the series names a summary or histogram family takes samples under.
var suffixes = [...]string{suffixCount: "_count", suffixSum: "_sum", suffixBucket: "_bucket"}

// labelUse says which labels of a family the mapping reads.
type labelUse uint8

const (
	labelsNone labelUse = iota
	labelsLoRA
	labelsCacheConfig
)

// seriesRef names a family the mapping reads and the suffix of one of its series.
type seriesRef struct {
	family int
	suffix suffix
}

// metricsSchema is one engine's metricNames compiled for the scanner. It is immutable.
type metricsSchema struct {
	names metricNames
	// families are the names of the families the mapping reads; an index is a family id.
	families []string
	// labels says, per family id, which of its labels the mapping reads.
	labels []labelUse
	// series maps the family names, and their names with each of suffixes, to families.
	series map[string]seriesRef
	// first marks the bytes those names start with, so that other lines are skipped at
	// their first byte.
	first [256]bool
}

// newMetricsSchema compiles names. It panics when a name ends in one of suffixes: the
// text format would read such a series as part of another family.
func newMetricsSchema(names metricNames) *metricsSchema {
	s := &metricsSchema{names: names, series: map[string]seriesRef{}}
	for _, list := range names.lists() {
		for _, name := range list {
			if _, ok := s.series[name]; ok {
				continue
			}
			for _, suf := range suffixes[1:] {
				if strings.HasSuffix(name, suf) {
					panic(fmt.Sprintf("metric family %q ends in %q", name, suf))
				}
			}
			use := labelsNone
			switch {
			case slices.Contains(names.loraInfo, name):
				use = labelsLoRA
			case slices.Contains(names.cacheConfig, name):
				use = labelsCacheConfig
			}
			id := len(s.families)
			s.families = append(s.families, name)
			s.labels = append(s.labels, use)
			s.series[name] = seriesRef{family: id}
			for suf := suffixCount; suf <= suffixBucket; suf++ {
				s.series[name+suffixes[suf]] = seriesRef{family: id, suffix: suf}
			}
			s.first[name[0]] = true
		}
	}
	return s
}

// familyState accumulates the samples of one family the mapping reads.
type familyState struct {
	id  int // the family's index in the schema
	typ familyType
	// derived[s] tells that the family's name with suffix s was created as a family of
	// its own (by a line before this family became a summary or histogram).
	derived [suffixBucket + 1]bool
	// samples counts the sample lines read into the family; it is present when > 0.
	samples int
	// sum adds the values of the samples of a typeValue family.
	sum  float64
	lora loraFold
	info infoFold
}

// label is one label pair of the line being read.
type label struct {
	name, value []byte // value is as written: escaped, without its quotes
	at          int    // the index of value in the line
	// pair is the pair as written when that is name="value" exactly; nil otherwise.
	pair []byte
}

// bucketLine is the last line read in full that is a series of a histogram with an
// le label. The lines after it that differ from it only in le and an integral value
// (the rest of the histogram's buckets) only add to the family's sample count: they
// are skipped without reading their labels (see nextBucket).
type bucketLine struct {
	line []byte // nil when there is none
	// le and leEnd delimit the le value in line; the label set ends before line[end].
	le, leEnd, end int
	family         int
	suffix         suffix
}

// nextBucket skips the line at the start of text if it is another bucket of
// lastBucket's series with an integral count, the common case, and returns the length
// of the line with its line ending: the line must be lastBucket's up to its le value,
// another le value, the rest of lastBucket's label set, blanks, a count of at most 19
// digits, optionally followed by a point and zeros (such as "412.0"), and the line
// ending. Such a bucket changes nothing but the family's sample count (its count is
// only scanned). Any other line, such as one with a timestamp, is left to line.
func (p *metricsParser) nextBucket(text []byte) (int, bool) {
	b := &p.lastBucket
	le := b.le
	// le is at least 5 bytes into line (as in x{le="): compare the 4 bytes before it
	// first, which tells most other lines at once.
	if b.line == nil || b.suffix == suffixCount || b.suffix == suffixSum || len(text) <= le ||
		[4]byte(text[le-4:le]) != [4]byte(b.line[le-4:le]) || string(text[:le-4]) != string(b.line[:le-4]) {
		return 0, false
	}
	i := le // le values are short: a loop beats bytes.IndexByte
	for i < len(text) && text[i] != '"' && text[i] != '\\' && text[i] != '\n' {
		i++
	}
	rest := b.line[b.leEnd:b.end]
	if len(text)-i < len(rest) || string(text[i:i+len(rest)]) != string(rest) {
		return 0, false
	}
	i = skipBlank(text, i+len(rest))
	count := i
	for i < len(text) && isDigit(text[i]) {
		i++
	}
	if digits := i - count; digits == 0 || digits > 19 {
		return 0, false
	}
	if i < len(text) && text[i] == '.' {
		for i++; i < len(text) && text[i] == '0'; i++ {
		}
	}
	if i < len(text) && text[i] == '\r' {
		i++
	}
	if i == len(text) || text[i] != '\n' {
		return 0, false
	}
	p.fams[b.family].samples++
	return i + 1, true
}

// group is one series (label set) of a summary or histogram family.
type group struct {
	family int
	// count is the last integral _count value, countFloat the last other one.
	count      uint64
	countFloat float64
	// bucketFloat tells that a bucket had a count that is not an integer.
	bucketFloat bool
	sum         float64
}

// sampleCount is the series' observation count as expfmt reports it: a histogram with
// a non-integer bucket count but no non-integer _count becomes a float histogram, whose
// integer count is 0.
func (g *group) sampleCount() uint64 {
	if g.bucketFloat && g.countFloat == 0 {
		return 0
	}
	return g.count
}

// groupKey identifies a group by its family and label signature.
type groupKey struct {
	family    int
	signature uint64
}

// metricsParser holds the state of one parse. Parsers are pooled; one parser serves
// one parse at a time.
type metricsParser struct {
	schema *metricsSchema
	body   bytes.Buffer
	fams   []familyState
	groups []group
	index  map[groupKey]int
	labels []label
	// lastBucket is the last bucket line read in full, if any.
	lastBucket bucketLine
	// lastName is the last metric name lookup read, and lastRef and lastOK what it found.
	lastName []byte
	lastRef  seriesRef
	lastOK   bool
	// scratch holds bytes built for the line being read.
	scratch []byte
}

// Bounds on what a pooled parser keeps: a parser that grew beyond them is dropped.
const (
	maxPooledBody   = 1 << 20
	maxPooledGroups = 1 << 10
)

var metricsParsers = sync.Pool{New: func() any { return &metricsParser{index: map[groupKey]int{}} }}

// signatureSeed seeds the hash of label sets; signatures live for one parse.
var signatureSeed = maphash.MakeSeed()

// reset prepares p to parse a text of schema's engine.
func (p *metricsParser) reset(schema *metricsSchema) {
	p.schema = schema
	if cap(p.fams) < len(schema.families) {
		p.fams = make([]familyState, len(schema.families))
	}
	p.fams = p.fams[:len(schema.families)]
	for i := range p.fams {
		f := &p.fams[i]
		*f = familyState{id: i, lora: f.lora.reset()}
	}
	p.groups = p.groups[:0]
	clear(p.index)
	p.lastBucket = bucketLine{}
	p.lastName = nil
}

// release returns p to the pool unless it grew too large to keep.
func (p *metricsParser) release() {
	if p.body.Cap() > maxPooledBody || cap(p.groups) > maxPooledGroups {
		return
	}
	p.schema = nil
	metricsParsers.Put(p)
}

// parse reads text, a whole exposition.
func (p *metricsParser) parse(text []byte) error {
	for n := 1; len(text) > 0; n++ {
		if next, ok := p.nextBucket(text); ok {
			text = text[next:]
			continue
		}
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			if skipBlank(text, 0) < len(text) {
				return fmt.Errorf("line %d: the text does not end with a newline", n)
			}
			return nil
		}
		line := text[:i]
		text = text[i+1:]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if err := p.line(line); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	return nil
}

// line reads one line, without its line ending.
func (p *metricsParser) line(s []byte) error {
	i := skipBlank(s, 0)
	switch {
	case i == len(s):
		return nil
	case s[i] == '#':
		return p.comment(s, i+1)
	case s[i] == '{' || s[i] == '"' || p.schema.first[s[i]]:
		return p.sample(s, i)
	case metricNameStart(s[i]):
		return nil // a sample of a family the mapping does not read
	}
	return fmt.Errorf("%q starts neither a sample nor a comment", s[i])
}

// comment reads a comment line from s[i], after its '#'. HELP and TYPE lines of the
// families the mapping reads create those families, and TYPE lines set their type;
// other comments are skipped.
func (p *metricsParser) comment(s []byte, i int) error {
	i = skipBlank(s, i)
	j := tokenEnd(s, i)
	isType := string(s[i:j]) == "TYPE"
	if j == len(s) || !isType && string(s[i:j]) != "HELP" {
		return nil
	}
	ref, ok, i, err := p.lookup(s, skipBlank(s, j))
	if err != nil {
		return err
	}
	if !ok || i == len(s) {
		return nil
	}
	if !isBlank(s[i]) {
		return errors.New("expected a blank after the metric name")
	}
	family, _, ok := p.route(ref)
	i = skipBlank(s, i)
	if !isType || i == len(s) {
		return nil
	}
	typ, err := parseType(s[i:])
	if err != nil || !ok {
		return err
	}
	f := &p.fams[family]
	if f.typ != typeUnset {
		return fmt.Errorf("second TYPE line for %q, or TYPE after its samples", p.schema.families[family])
	}
	f.typ = typ
	return nil
}

// parseType parses the type of a TYPE line, in any case, as expfmt does.
func parseType(s []byte) (familyType, error) {
	switch string(s) { // the types as exporters write them, before any other case
	case "counter", "gauge", "untyped":
		return typeValue, nil
	case "histogram":
		return typeHistogram, nil
	}
	t := string(s)
	if !isASCII(s) {
		t = strings.ToUpper(t)
	}
	switch {
	case strings.EqualFold(t, "counter"), strings.EqualFold(t, "gauge"), strings.EqualFold(t, "untyped"):
		return typeValue, nil
	case strings.EqualFold(t, "summary"):
		return typeSummary, nil
	case strings.EqualFold(t, "histogram"), strings.EqualFold(t, "gauge_histogram"), strings.EqualFold(t, "gaugehistogram"):
		return typeHistogram, nil
	}
	return typeUnset, fmt.Errorf("unknown metric type %q", s)
}

// route returns the family a HELP, TYPE or sample line naming ref creates or adds to,
// as the text format assigns series to families: a name that is already a family
// stays one; _count and _sum go to a summary or histogram of the base name, _bucket to
// a histogram; any other name starts a family. ok is false when that family is not
// one the mapping reads (a series with a suffix that its base family does not take).
func (p *metricsParser) route(ref seriesRef) (family int, suf suffix, ok bool) {
	f := &p.fams[ref.family]
	switch {
	case ref.suffix == suffixNone:
		return ref.family, suffixNone, true
	case f.derived[ref.suffix]:
		return 0, 0, false
	case f.typ == typeHistogram || f.typ == typeSummary && ref.suffix != suffixBucket:
		return ref.family, ref.suffix, true
	}
	f.derived[ref.suffix] = true
	return 0, 0, false
}

// sample reads the sample line s, whose first byte other than blanks is s[i], and adds
// it to its family if that is one the mapping reads.
func (p *metricsParser) sample(s []byte, i int) error {
	p.labels = p.labels[:0]
	braced := s[i] == '{'
	var (
		name []byte
		ref  seriesRef
		ok   bool
		err  error
	)
	if braced {
		if name, i, err = p.readLabels(s, i, true); err != nil {
			return err
		}
		if name == nil {
			return errors.New("the label set names no metric")
		}
		ref, ok = p.schema.series[string(name)]
	} else if ref, ok, i, err = p.lookup(s, i); err != nil {
		return err
	}
	if !ok {
		return nil
	}
	family, suf, ok := p.route(ref)
	if !ok {
		return nil
	}
	if i = skipBlank(s, i); !braced && i < len(s) && s[i] == '{' {
		if _, i, err = p.readLabels(s, i, false); err != nil {
			return err
		}
	}
	v, err := readValue(s, i)
	if err != nil {
		return err
	}
	f := &p.fams[family]
	if f.typ == typeUnset {
		f.typ = typeValue
	}
	if f.typ == typeValue {
		f.samples++
		f.sum += v
		p.addLabels(f, family, v)
		return nil
	}
	skip := "quantile"
	if f.typ == typeHistogram {
		skip = "le"
	}
	g, created := p.group(family, p.signature(skip))
	if created {
		p.addLabels(f, family, 0) // the value of a summary or histogram series reads as 0
	}
	l := p.label("le")
	if l == nil {
		return p.addToGroup(family, suf, g, v, nil, false)
	}
	if f.typ == typeHistogram {
		p.lastBucket = bucketLine{line: s, le: l.at, leEnd: l.at + len(l.value), end: i, family: family, suffix: suf}
	}
	return p.addToGroup(family, suf, g, v, l.value, true)
}

// lookup reads the metric name at s[i] and returns the series it names, whether that
// is one the mapping reads, and the index after the name. It remembers the last name:
// a family's HELP, TYPE and sample lines usually name it in turn. Otherwise, since the
// names the mapping reads commonly end at the line's first space or '{', which two
// vectorised searches find, it first asks the series map for the run up to there; only
// a run that is not a name the mapping reads is read again byte by byte as a name.
func (p *metricsParser) lookup(s []byte, i int) (ref seriesRef, ok bool, end int, err error) {
	if n := len(p.lastName); n > 0 && bytes.HasPrefix(s[i:], p.lastName) &&
		(i+n == len(s) || nameChars[s[i+n]]&metricChar == 0 && s[i+n] != '"') {
		return p.lastRef, p.lastOK, i + n, nil
	}
	runEnd := len(s)
	if k := bytes.IndexByte(s[i:], ' '); k >= 0 {
		runEnd = i + k
	}
	if k := bytes.IndexByte(s[i:runEnd], '{'); k >= 0 {
		runEnd = i + k
	}
	if ref, ok = p.schema.series[string(s[i:runEnd])]; ok { // so a plain name, ending there
		p.lastName, p.lastRef, p.lastOK = s[i:runEnd], ref, ok
		return ref, ok, runEnd, nil
	}
	name, end, err := readName(s, i, metricChar)
	if err != nil {
		return seriesRef{}, false, 0, err
	}
	plain := len(name) > 0 && end-i == len(name) // a plain run of name characters
	if !plain || end != runEnd {                 // else name is the run the map just refused
		ref, ok = p.schema.series[string(name)]
	}
	if plain {
		p.lastName, p.lastRef, p.lastOK = name, ref, ok
	}
	return ref, ok, end, nil
}

// readValue reads the value and optional timestamp of a sample from s[i].
func readValue(s []byte, i int) (float64, error) {
	v, j, err := parseValue(s, skipBlank(s, i))
	if err != nil {
		return 0, err
	}
	if i = skipBlank(s, j); i < len(s) {
		j = tokenEnd(s, i)
		if _, err := strconv.ParseInt(string(s[i:j]), 10, 64); err != nil {
			return 0, fmt.Errorf("invalid timestamp %q", s[i:j])
		}
		if skipBlank(s, j) < len(s) {
			return 0, fmt.Errorf("text after the timestamp: %q", s[j:])
		}
	}
	return v, nil
}

// addToGroup adds a sample of value v to group g of the summary or histogram family,
// under the series suffix suf; le is the sample's le label as written, if hasLE.
func (p *metricsParser) addToGroup(family int, suf suffix, g int, v float64, le []byte, hasLE bool) error {
	f := &p.fams[family]
	f.samples++
	if f.typ != typeHistogram {
		return nil
	}
	h := &p.groups[g]
	u := uint64(v)
	switch {
	case suf == suffixCount && v == float64(u):
		h.count = u
	case suf == suffixCount && v < 0:
		return errors.New("negative histogram count")
	case suf == suffixCount:
		h.countFloat = v
	case suf == suffixSum:
		h.sum = v
	case v == float64(u) || !hasLE: // an integral bucket count, or no bucket
	default:
		bound, err := parseFloat(le)
		switch {
		case err != nil:
			return fmt.Errorf("invalid le label %q", le)
		case bound != bound: // NaN: no bucket
		case v < 0:
			return errors.New("negative histogram bucket count")
		default:
			h.bucketFloat = true
		}
	}
	return nil
}

// addLabels feeds a sample of value v and p.labels to the fold of the labels the
// mapping reads from f, if any.
func (p *metricsParser) addLabels(f *familyState, family int, v float64) {
	switch p.schema.labels[family] {
	case labelsLoRA:
		s := unescape(p.scratch[:0], p.labelValue("running_lora_adapters"))
		n := len(s)
		s = unescape(s, p.labelValue("waiting_lora_adapters"))
		p.scratch = s
		f.lora.add(v, s[:n], s[n:], p.labelValue("max_lora"))
	case labelsCacheConfig:
		f.info.add(v, p.labelValue("block_size"), p.labelValue("num_gpu_blocks"))
	}
}

// group returns the index of the group of family with the given signature, creating
// it if needed.
func (p *metricsParser) group(family int, signature uint64) (g int, created bool) {
	key := groupKey{family: family, signature: signature}
	if g, ok := p.index[key]; ok {
		return g, false
	}
	p.index[key] = len(p.groups)
	p.groups = append(p.groups, group{family: family})
	return len(p.groups) - 1, true
}

// signature hashes p.labels other than skip, regardless of their order.
func (p *metricsParser) signature(skip string) uint64 {
	var sig uint64
	for _, l := range p.labels {
		if string(l.name) == skip {
			continue
		}
		pair := l.pair
		if pair == nil {
			p.scratch = append(append(append(append(p.scratch[:0], l.name...), '=', '"'), l.value...), '"')
			pair = p.scratch
		}
		sig += maphash.Bytes(signatureSeed, pair)
	}
	return sig
}

// label returns the label of the current line named name, or nil.
func (p *metricsParser) label(name string) *label {
	for i := range p.labels {
		if string(p.labels[i].name) == name {
			return &p.labels[i]
		}
	}
	return nil
}

// labelValue returns the value, as written, of the label of the current line named
// name; nil if there is none.
func (p *metricsParser) labelValue(name string) []byte {
	if l := p.label(name); l != nil {
		return l.value
	}
	return nil
}

// readLabels reads the label set that opens at s[i] into p.labels and returns the
// index after it. With braced (the set opens the line), one item of the set may be
// the metric name, quoted, instead of a label pair; readLabels returns it.
func (p *metricsParser) readLabels(s []byte, i int, braced bool) (name []byte, end int, err error) {
	for i++; ; {
		if i = skipBlank(s, i); i < len(s) && s[i] == '}' {
			return name, i + 1, nil
		}
		start := i
		var ln []byte
		if ln, i, err = readName(s, i, labelChar); err != nil {
			return nil, 0, err
		}
		if len(ln) == 0 {
			return nil, 0, errors.New("invalid label name")
		}
		plain := i-start == len(ln)
		if i = skipBlank(s, i); i == len(s) {
			return nil, 0, errors.New("unterminated label set")
		}
		if s[i] != '=' {
			if !braced || name != nil || s[i] != ',' && s[i] != '}' {
				return nil, 0, fmt.Errorf("expected '=' after label name %q", ln)
			}
			if name = ln; s[i] == ',' {
				i++
			}
			continue
		}
		if !plain && !validLabelName(ln) {
			return nil, 0, fmt.Errorf("invalid label name %q", ln)
		}
		eq := i
		if i = skipBlank(s, i+1); i == len(s) || s[i] != '"' {
			return nil, 0, fmt.Errorf("expected '\"' to start the value of label %q", ln)
		}
		closing := closingQuote(s, i+1)
		if closing < 0 {
			return nil, 0, fmt.Errorf("unterminated value of label %q", ln)
		}
		l := label{name: ln, value: s[i+1 : closing], at: i + 1}
		if plain && eq == start+len(ln) && i == eq+1 {
			l.pair = s[start : closing+1]
		}
		p.labels = append(p.labels, l)
		switch i = skipBlank(s, closing+1); {
		case i < len(s) && s[i] == ',':
			i++
		case i < len(s) && s[i] == '}':
			return name, i + 1, nil
		default:
			return nil, 0, fmt.Errorf("expected ',' or '}' after the value of label %q", ln)
		}
	}
}

// readName reads a metric name (class metricChar) or label name (labelChar) at s[i]
// and returns it and the index after it. As in the text format, a name is a run of
// name characters that may end in one double-quoted section (a whole quoted name is
// the usual case); an empty name means s[i] cannot start one. A name with an escape in
// its quoted section is returned as written: no name the mapping reads, nor a valid
// label name, has one.
func readName(s []byte, i int, class uint8) (name []byte, end int, err error) {
	j := i
	if j < len(s) && !isDigit(s[j]) {
		for j < len(s) && nameChars[s[j]]&class != 0 {
			j++
		}
	}
	if j == len(s) || s[j] != '"' {
		return s[i:j], j, nil
	}
	closing := closingQuote(s, j+1)
	if closing < 0 {
		return nil, 0, errors.New("unterminated quoted name")
	}
	if j == i {
		return s[j+1 : closing], closing + 1, nil
	}
	return append(s[i:j:j], s[j+1:closing]...), closing + 1, nil
}

// closingQuote returns the index of the first double quote at or after s[i] that no
// backslash escapes, or -1.
func closingQuote(s []byte, i int) int {
	if q := bytes.IndexByte(s[i:], '"'); q >= 0 && bytes.IndexByte(s[i:i+q], '\\') < 0 {
		return i + q
	}
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// unescape appends the label value v, as written, to dst with its escapes (\\, \" and
// \n) resolved.
func unescape(dst, v []byte) []byte {
	for {
		i := bytes.IndexByte(v, '\\')
		if i < 0 || i == len(v)-1 {
			return append(dst, v...)
		}
		dst = append(dst, v[:i]...)
		if c := v[i+1]; c == 'n' {
			dst = append(dst, '\n')
		} else {
			dst = append(dst, c)
		}
		v = v[i+2:]
	}
}

// parseFloat parses a sample value as the text format allows: a decimal float, Inf or
// NaN with an optional sign; not the hexadecimal forms or underscores that
// strconv.ParseFloat also accepts.
func parseFloat(b []byte) (float64, error) {
	for _, c := range b {
		if c == 'p' || c == 'P' || c == '_' {
			return 0, errors.New("unsupported character in float")
		}
	}
	return strconv.ParseFloat(string(b), 64)
}

// parseValue parses the sample value at s[i] as parseFloat does and returns the index
// after it; a line ending ends the value too.
func parseValue(s []byte, i int) (float64, int, error) {
	if n, j, ok := plainInteger(s, i); ok {
		return float64(n), j, nil // rounds as parseFloat does
	}
	j := tokenEnd(s, i)
	if j == i {
		return 0, 0, errors.New("sample has no value")
	}
	v, err := parseFloat(s[i:j])
	if err != nil {
		return 0, 0, fmt.Errorf("invalid sample value %q", s[i:j])
	}
	return v, j, nil
}

// plainInteger parses the common sample value at s[i] that is an integer of at most 19
// digits, optionally followed by a point and zeros (such as "412.0"), and returns the
// index after it. ok is false for any other value.
func plainInteger(s []byte, i int) (n uint64, end int, ok bool) {
	j := i
	for ; j < len(s) && isDigit(s[j]); j++ {
		n = n*10 + uint64(s[j]-'0')
	}
	digits := j - i
	if j < len(s) && s[j] == '.' {
		for j++; j < len(s) && s[j] == '0'; j++ {
		}
	}
	if digits == 0 || digits > 19 || j < len(s) && !isBlank(s[j]) && s[j] != '\r' && s[j] != '\n' {
		return 0, 0, false
	}
	return n, j, true
}

// atoi parses a decimal label value, returning 0 for anything else (such as "None").
func atoi(b []byte) int {
	digits := b
	if len(digits) > 0 && (digits[0] == '+' || digits[0] == '-') {
		digits = digits[1:]
	}
	if len(digits) == 0 || !isDigits(digits) {
		return 0
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return 0
	}
	return n
}

// skipBlank returns the index of the first byte at or after s[i] that is neither a
// space nor a tab, or len(s).
func skipBlank(s []byte, i int) int {
	for i < len(s) && isBlank(s[i]) {
		i++
	}
	return i
}

// tokenEnd returns the index of the first space or tab at or after s[i], or len(s).
func tokenEnd(s []byte, i int) int {
	for i < len(s) && !isBlank(s[i]) {
		i++
	}
	return i
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isDigits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// Classes of name characters in nameChars.
const (
	labelChar  uint8 = 1 << iota // [A-Za-z0-9_]
	metricChar                   // [A-Za-z0-9_:]
)

// nameChars maps each byte to the classes of name characters it belongs to.
var nameChars = func() (t [256]uint8) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
			t[c] = labelChar | metricChar
		case c == ':':
			t[c] = metricChar
		}
	}
	return t
}()

func metricNameStart(c byte) bool { return nameChars[c]&metricChar != 0 && !isDigit(c) }

// validLabelName reports whether b is a label name of the classic character set.
func validLabelName(b []byte) bool {
	if len(b) == 0 || isDigit(b[0]) {
		return false
	}
	for _, c := range b {
		if nameChars[c]&labelChar == 0 {
			return false
		}
	}
	return true
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
