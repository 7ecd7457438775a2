package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// base carries what every tool shares: its workspace and its declaration,
// built once so Definition never changes.
type base struct {
	w   *Workspace
	def *agentdv1.Tool
}

// Definition implements [agentloop.Tool].
func (b base) Definition() *agentdv1.Tool { return b.def }

type readTool struct{ base }

// sniffBytes is how much of a file decides image or binary: enough for
// http.DetectContentType (512) and for a NUL byte check like git's (8000).
const sniffBytes = 8192

// Execute implements [agentloop.Tool].
func (t *readTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	p, err := stringArg(call.Args, "path", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	offset, _, err := intArg(call.Args, "offset", 1, 1)
	if err != nil {
		return agentloop.Result{}, err
	}
	limit, limited, err := intArg(call.Args, "limit", 0, 1)
	if err != nil {
		return agentloop.Result{}, err
	}
	w := t.w
	tg, err := w.resolve(p)
	if err != nil {
		return agentloop.Result{}, err
	}
	if err := w.checkSpecial(tg); err != nil {
		return agentloop.Result{}, err
	}
	f, fi, err := w.openRegular(tg, os.O_RDONLY)
	if err != nil {
		return agentloop.Result{}, err
	}
	defer f.Close()

	head := make([]byte, sniffBytes)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return agentloop.Result{}, fmt.Errorf("Cannot read %s: %w", p, err)
	}
	head = head[:n]
	mime := http.DetectContentType(head)
	if provider.IsImageMIMEType(mime) {
		return t.image(f, head, fi.Size(), tg.shown, mime)
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return agentloop.Result{}, fmt.Errorf("Cannot read %s: it is a binary file (%s). read_file reads text files and png, jpeg, gif or webp images", p, strings.SplitN(mime, ";", 2)[0])
	}
	return t.text(ctx, io.MultiReader(bytes.NewReader(head), f), tg.shown, offset, limit, limited)
}

func (t *readTool) image(f *os.File, head []byte, size int64, shown, mime string) (agentloop.Result, error) {
	note := fmt.Sprintf("Read image file [%s]", mime)
	max := t.w.opts.MaxImageBytes
	d := map[string]any{"path": shown, "mime_type": mime, "bytes": size}
	if size > int64(max) {
		d["omitted"] = true
		note += fmt.Sprintf("\n[Image omitted: %s exceeds the %s image size limit.]", formatSize(int(size)), formatSize(max))
		det, err := details(d)
		return agentloop.Result{Content: text(note), Details: det}, err
	}
	data, err := io.ReadAll(io.LimitReader(io.MultiReader(bytes.NewReader(head), f), int64(max)+1))
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot read %s: %w", shown, err)
	}
	if len(data) > max {
		return agentloop.Result{}, fmt.Errorf("Cannot read %s: the image grew beyond the %s limit while it was read", shown, formatSize(max))
	}
	det, err := details(d)
	return agentloop.Result{
		Content: append(text(note), &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Image{
			Image: &agentdv1.ImageContent{Data: data, MimeType: mime},
		}}),
		Details: det,
	}, err
}

// text streams the file once: it keeps only the lines that will be shown
// and counts the rest, so a huge file costs no memory.
func (t *readTool) text(ctx context.Context, r io.Reader, shown string, offset, limit int, limited bool) (agentloop.Result, error) {
	o := t.w.opts
	br := bufio.NewReaderSize(r, 64*1024)
	var (
		out          []byte // the numbered lines shown, joined by newlines
		shownLines   int
		total        int
		cut          string // "lines" or "bytes" once the caps stopped output
		firstTooLong int    // size of the first wanted line when it alone exceeds the cap
		userStop     bool
	)
	var scratch []byte
	for {
		line, size, eof, err := readLine(br, o.MaxOutputBytes+1, scratch[:0])
		scratch = line
		if err != nil {
			return agentloop.Result{}, fmt.Errorf("Cannot read %s: %w", shown, err)
		}
		if eof && size == 0 {
			break
		}
		total++
		if total%4096 == 0 && ctx.Err() != nil {
			return agentloop.Result{}, errAborted
		}
		switch {
		case total < offset || cut != "" || userStop || firstTooLong > 0:
		case limited && total >= offset+limit:
			userStop = true
		case shownLines >= o.MaxOutputLines:
			cut = "lines"
		default:
			start := len(out)
			if shownLines > 0 {
				out = append(out, '\n')
			}
			out = appendNumbered(out, total, line)
			if len(out) > o.MaxOutputBytes {
				out = out[:start]
				if shownLines == 0 {
					firstTooLong = size
				} else {
					cut = "bytes"
				}
				break
			}
			shownLines++
		}
		if eof {
			break
		}
	}
	if total == 0 && offset == 1 {
		det, err := details(map[string]any{"path": shown, "total_lines": 0})
		return agentloop.Result{Content: text("(empty file)"), Details: det}, err
	}
	if offset > total {
		return agentloop.Result{}, fmt.Errorf("Offset %d is beyond end of file (%d lines total)", offset, total)
	}
	d := map[string]any{"path": shown, "total_lines": total, "start_line": offset}
	if firstTooLong > 0 {
		d["truncated"] = true
		d["truncated_by"] = "bytes"
		det, err := details(d)
		msg := fmt.Sprintf("[Line %d is %s, exceeds %s limit. Use bash: sed -n '%dp' %s | head -c %d]",
			offset, formatSize(firstTooLong), formatSize(o.MaxOutputBytes), offset, shown, o.MaxOutputBytes)
		return agentloop.Result{Content: text(msg), Details: det}, err
	}
	end := offset + shownLines - 1
	d["end_line"] = end
	body := string(out)
	switch {
	case cut == "lines":
		body += fmt.Sprintf("\n\n[Showing lines %d-%d of %d. Use offset=%d to continue.]", offset, end, total, end+1)
	case cut == "bytes":
		body += fmt.Sprintf("\n\n[Showing lines %d-%d of %d (%s limit). Use offset=%d to continue.]", offset, end, total, formatSize(o.MaxOutputBytes), end+1)
	case userStop:
		body += fmt.Sprintf("\n\n[%d more lines in file. Use offset=%d to continue.]", total-end, end+1)
	}
	if cut != "" {
		d["truncated"] = true
		d["truncated_by"] = cut
	}
	det, err := details(d)
	return agentloop.Result{Content: text(body), Details: det}, err
}

// appendNumbered appends a line the way cat -n prints it: the number right
// aligned in six columns, a tab, the text (invalid UTF-8 replaced).
func appendNumbered(dst []byte, n int, line []byte) []byte {
	var num [20]byte
	digits := strconv.AppendInt(num[:0], int64(n), 10)
	for i := len(digits); i < 6; i++ {
		dst = append(dst, ' ')
	}
	dst = append(dst, digits...)
	dst = append(dst, '\t')
	if utf8.Valid(line) {
		return append(dst, line...)
	}
	return append(dst, bytes.ToValidUTF8(line, []byte("\uFFFD"))...)
}

// readLine reads one line without its newline (and a carriage return before
// it), keeping at most keep bytes of it; size is the line's full length
// including the newline, so 0 with eof means the input ended.
// The line is appended to buf, which the caller may reuse.
func readLine(br *bufio.Reader, keep int, buf []byte) (line []byte, size int, eof bool, err error) {
	line = buf
	complete := true
	for {
		chunk, e := br.ReadSlice('\n')
		size += len(chunk)
		if room := keep - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
		}
		if len(line) < size {
			complete = false
		}
		switch {
		case e == nil:
			if complete {
				line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			}
			return line, size - 1, false, nil
		case errors.Is(e, bufio.ErrBufferFull):
			continue
		case errors.Is(e, io.EOF):
			return line, size, true, nil
		default:
			return nil, 0, false, e
		}
	}
}
