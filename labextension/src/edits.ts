/**
 * Edits the kernel sends (Apply fix): the text of each named cell is replaced in the notebook's
 * shared model, in one transaction (one Ctrl+Z in the cell undoes it), and the changed lines are
 * marked for a moment. The cell is not run.
 */
import { CodeMirrorEditor } from '@jupyterlab/codemirror';
import { Cell } from '@jupyterlab/cells';
import { INotebookTracker } from '@jupyterlab/notebook';
import { StateEffect, StateField, RangeSetBuilder } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView } from '@codemirror/view';

import { IEditMessage, KernelLink } from './link';

/** How long changed lines stay marked (ms). */
const MARKED_FOR = 2500;
export const CHANGED_LINE_CLASS = 'jp-devinspect-changed-line';

const setMarks = StateEffect.define<number[]>();
const lineMark = Decoration.line({ class: CHANGED_LINE_CLASS });

const marks = StateField.define<DecorationSet>({
  create: () => Decoration.none,
  update(value, tr) {
    value = value.map(tr.changes);
    for (const effect of tr.effects) {
      if (effect.is(setMarks)) {
        const builder = new RangeSetBuilder<Decoration>();
        const doc = tr.state.doc;
        for (const line of [...effect.value].sort((a, b) => a - b)) {
          if (line >= 1 && line <= doc.lines) {
            const at = doc.line(line).from;
            builder.add(at, at, lineMark);
          }
        }
        value = builder.finish();
      }
    }
    return value;
  },
  provide: field => EditorView.decorations.from(field)
});

/** Edits already made on this page (a kernel's message reaches every comm that hears it). */
const made = new Set<string>();

export function editHandler(tracker: INotebookTracker) {
  return (link: KernelLink, edit: IEditMessage): string[] => {
    if (made.has(edit.edit_id)) {
      return [];
    }
    made.add(edit.edit_id);
    const wanted = new Map(edit.cells.map(c => [c.cell_id, c]));
    const done: string[] = [];
    tracker.forEach(panel => {
      if (panel.sessionContext.session?.kernel?.id !== link.kernel.id) {
        return;
      }
      for (const cell of panel.content.widgets) {
        const change = wanted.get(cell.model.id);
        if (!change) {
          continue;
        }
        if (replaceText(cell, change.old, change.new)) {
          done.push(change.cell_id);
          markLines(cell, change.lines);
        }
      }
    });
    return done;
  };
}

/** Replace ``old`` by ``text`` in the cell's shared model, changing only the part that differs.
 * A cell whose text is no longer ``old`` (the user typed since) is left as it is. */
export function replaceText(cell: Cell, old: string, text: string): boolean {
  const shared = cell.model.sharedModel;
  const current = shared.getSource();
  const body = current.replace(/\s+$/, '');
  if (body !== old.replace(/\s+$/, '')) {
    return false;
  }
  const wanted = text + current.slice(body.length);
  let start = 0;
  while (start < current.length && start < wanted.length && current[start] === wanted[start]) {
    start++;
  }
  let end = 0;
  while (
    end < current.length - start &&
    end < wanted.length - start &&
    current[current.length - 1 - end] === wanted[wanted.length - 1 - end]
  ) {
    end++;
  }
  const undo = (shared as any).undoManager;
  undo?.stopCapturing?.(); // one undo step of its own, not merged with what the user typed just before
  shared.updateSource(start, current.length - end, wanted.slice(start, wanted.length - end));
  undo?.stopCapturing?.();
  return true;
}

function markLines(cell: Cell, lines: number[]): void {
  const editor = cell.editor;
  if (!(editor instanceof CodeMirrorEditor)) {
    return;
  }
  const view = editor.editor;
  if (view.state.field(marks, false) === undefined) {
    view.dispatch({ effects: StateEffect.appendConfig.of(marks) });
  }
  view.dispatch({ effects: setMarks.of(lines) });
  window.setTimeout(() => {
    if (!editor.isDisposed) {
      view.dispatch({ effects: setMarks.of([]) });
    }
  }, MARKED_FOR);
}
