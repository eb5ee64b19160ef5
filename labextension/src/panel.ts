/**
 * The Devices side panel: the active notebook's kernel's devices (allocated / reserved / peak,
 * and allocated over the last cells), its findings with Apply fix, and its largest tensors with
 * a filter box. The skeleton is built once; each refresh replaces the contents of its sections,
 * so the page keeps nothing per cell.
 */
import { Widget } from '@lumino/widgets';

import { bytes, IDeviceMemory, IMemoryMessage, KernelLink } from './link';

type Child = Node | string | null | undefined | false;

function h(tag: string, attrs: { [key: string]: string } = {}, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    node.append(child);
  }
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';

export class DevicesPanel extends Widget {
  constructor() {
    super();
    this.id = 'devinspect-devices-panel';
    this.addClass('jp-devinspect-panel');
    this.title.caption = 'Devices (devinspect)';
    this._status = h('div', { class: 'jp-devinspect-status' });
    this._devices = h('div', { class: 'jp-devinspect-devices' });
    this._findings = h('div', { class: 'jp-devinspect-findings' });
    this._filter = h('input', {
      class: 'jp-devinspect-filter jp-mod-styled',
      type: 'search',
      placeholder: 'filter by name',
      'aria-label': 'filter tensors by name'
    }) as HTMLInputElement;
    this._filter.addEventListener('input', () => {
      if (this._link) {
        this._link.filter = this._filter.value;
        this._link.requestScan();
      }
    });
    this._tensors = h('div', { class: 'jp-devinspect-tensors' });
    this._body = h(
      'div',
      { class: 'jp-devinspect-body' },
      h('h3', {}, 'Devices'),
      this._devices,
      h('h3', {}, 'Findings'),
      this._findings,
      h('h3', {}, 'Largest tensors'),
      this._filter,
      this._tensors
    );
    this.node.append(h('div', { class: 'jp-devinspect-title' }, 'Devices'), this._status, this._body);
    this.render();
  }

  get link(): KernelLink | null {
    return this._link;
  }

  /** Show ``link`` (the active notebook's kernel's), or nothing. */
  setLink(link: KernelLink | null, notebook: string): void {
    if (this._link === link && this._notebook === notebook) {
      return;
    }
    if (this._link) {
      this._link.changed.disconnect(this.render, this);
      this._link.wanted = false;
    }
    this._link = link;
    this._notebook = notebook;
    if (link) {
      link.changed.connect(this.render, this);
      link.wanted = this.isVisible;
      this._filter.value = link.filter;
      if (link.wanted && link.state === 'live' && !link.scan) {
        link.requestScan();
      }
    }
    this.render();
  }

  protected onAfterShow(): void {
    if (this._link) {
      this._link.wanted = true;
      if (this._link.state === 'live') {
        this._link.requestScan();
      }
    }
    this.render();
  }

  protected onAfterHide(): void {
    if (this._link) {
      this._link.wanted = false;
    }
  }

  render(): void {
    const link = this._link;
    this._status.replaceChildren();
    this._status.removeAttribute('data-state');
    if (!link) {
      this._status.append('Open a notebook to see its kernel’s devices.');
      this._status.dataset.state = 'none';
      this._body.hidden = true;
      return;
    }
    this._status.dataset.state = link.state;
    this._status.append(h('div', { class: 'jp-devinspect-notebook' }, this._notebook));
    if (link.state !== 'live') {
      this._body.hidden = true;
      if (link.restarted || link.state === 'restarted') {
        this._status.append(
          h('p', { class: 'jp-devinspect-restarted' }, 'The kernel restarted: the devices, findings and tensors shown before are gone.')
        );
      }
      if (link.state === 'dead') {
        this._status.append(h('p', {}, 'The kernel is not running.'));
      } else if (link.state === 'probing') {
        this._status.append(h('p', {}, 'Asking the kernel…'));
      } else if (link.state === 'absent' || link.state === 'restarted') {
        const button = h('button', { class: 'jp-Button jp-mod-styled jp-mod-accept jp-devinspect-load' }, 'Load devinspect');
        button.addEventListener('click', () => link.load());
        this._status.append(h('p', {}, 'load devinspect in this kernel'), button);
      }
      return;
    }
    this._body.hidden = false;
    this._renderDevices(link.memory);
    this._renderFindings(link);
    this._renderTensors(link);
  }

  private _renderDevices(memory: IMemoryMessage | null): void {
    this._devices.replaceChildren();
    if (!memory || memory.devices.length === 0) {
      this._devices.append(h('p', { class: 'jp-devinspect-quiet' }, 'No accelerator in use in this kernel.'));
      return;
    }
    const rows = memory.devices.map((d: IDeviceMemory) =>
      h(
        'tr',
        { 'data-device': d.device },
        h('th', { scope: 'row' }, d.device),
        h('td', { 'data-field': 'allocated', 'data-bytes': String(d.allocated) }, bytes(d.allocated)),
        h('td', { 'data-field': 'reserved', 'data-bytes': String(d.reserved) }, bytes(d.reserved)),
        h('td', { 'data-field': 'peak', 'data-bytes': String(d.peak) }, bytes(d.peak))
      )
    );
    this._devices.append(
      h(
        'table',
        { class: 'jp-devinspect-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'device'), h('th', {}, 'allocated'), h('th', {}, 'reserved'), h('th', {}, 'peak'))),
        h('tbody', {}, ...rows)
      )
    );
    for (const d of memory.devices) {
      const points = memory.history.map(entry => entry.allocated[d.device] ?? 0);
      if (points.length > 1 && points.some(p => p > 0)) {
        this._devices.append(sparkline(d.device, points));
      }
    }
  }

  private _renderFindings(link: KernelLink): void {
    this._findings.replaceChildren();
    const scan = link.scan;
    if (!scan) {
      this._findings.append(h('p', { class: 'jp-devinspect-quiet' }, 'Reading the namespace…'));
      return;
    }
    if (scan.error) {
      this._findings.append(h('p', { class: 'jp-devinspect-error' }, scan.error));
    }
    if (scan.findings.length === 0) {
      this._findings.append(h('p', { class: 'jp-devinspect-quiet' }, 'Nothing looks wrong.'));
      return;
    }
    for (const f of scan.findings) {
      const done = link.applied.get(f.index);
      const button = h('button', { class: 'jp-Button jp-mod-styled jp-devinspect-apply' }, 'Apply fix') as HTMLButtonElement;
      button.disabled = !f.can_apply || (!!done && done.ok);
      button.title = f.fix ?? '';
      button.addEventListener('click', () => link.apply(f.index));
      this._findings.append(
        h(
          'div',
          { class: 'jp-devinspect-finding', 'data-severity': f.severity },
          h('div', { class: 'jp-devinspect-finding-head' }, h('span', { class: 'jp-devinspect-severity' }, f.severity), h('code', {}, f.subject)),
          h('div', { class: 'jp-devinspect-message' }, f.message),
          f.fix ? h('div', { class: 'jp-devinspect-fix' }, f.fix) : null,
          f.fix ? button : null,
          done ? h('div', { class: done.ok ? 'jp-devinspect-done' : 'jp-devinspect-error' }, (done.ok ? '✔ ' : '✖ ') + done.message) : null
        )
      );
    }
  }

  private _renderTensors(link: KernelLink): void {
    this._tensors.replaceChildren();
    const scan = link.scan;
    if (!scan) {
      return;
    }
    // Two lines a tensor (name and bytes; device, dtype and shape): readable at the panel's default width.
    const rows = scan.tensors.map(t =>
      h(
        'li',
        { class: 'jp-devinspect-tensor' },
        h(
          'div',
          { class: 'jp-devinspect-tensor-head' },
          h('code', { class: 'jp-devinspect-name' }, t.name),
          h('span', { class: 'jp-devinspect-bytes', 'data-bytes': String(t.bytes) }, bytes(t.bytes))
        ),
        h('div', { class: 'jp-devinspect-tensor-meta' }, `${t.device} · ${t.dtype ?? ''}${t.shape ? '[' + t.shape.join(', ') + ']' : ''} · ${t.kind}`)
      )
    );
    this._tensors.append(
      h('ul', { class: 'jp-devinspect-tensor-list' }, ...rows),
      h(
        'p',
        { class: 'jp-devinspect-quiet' },
        `${scan.tensors.length} of ${scan.matching}` + (scan.filter ? ` matching “${scan.filter}”` : '') + ` (${scan.total} tensors)`
      )
    );
  }

  private _link: KernelLink | null = null;
  private _notebook = '';
  private _status: HTMLElement;
  private _body: HTMLElement;
  private _devices: HTMLElement;
  private _findings: HTMLElement;
  private _filter: HTMLInputElement;
  private _tensors: HTMLElement;
}

/** Allocated bytes over the last cells, as a small line. */
function sparkline(device: string, points: number[]): Element {
  const width = 200;
  const height = 36;
  const top = Math.max(...points, 1);
  const step = width / Math.max(points.length - 1, 1);
  const path = points.map((p, i) => `${(i * step).toFixed(1)},${(height - 2 - (p / top) * (height - 4)).toFixed(1)}`).join(' ');
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('class', 'jp-devinspect-history');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `${device}: allocated over the last ${points.length} cells, up to ${bytes(top)}`);
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', path);
  svg.append(line);
  const figure = h('figure', { class: 'jp-devinspect-figure' }, h('figcaption', {}, `${device} allocated, last ${points.length} cells (max ${bytes(top)})`));
  figure.append(svg);
  return figure;
}
