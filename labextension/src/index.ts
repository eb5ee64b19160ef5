/**
 * devinspect in JupyterLab and Notebook 7: Apply fix edits the cells at once, a Devices side
 * panel for the active notebook's kernel, and its accelerator memory in the status bar.
 *
 * Everything comes from the kernel over one comm (target "devinspect"); a kernel without
 * devinspect shows a button that loads it, and the kernel works the same without this page.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { editHandler } from './edits';
import { bytes, KernelLink } from './link';
import { DevicesPanel } from './panel';

const OPEN_PANEL = 'devinspect:open-devices-panel';

const devicesIcon = new LabIcon({
  name: 'devinspect:devices',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161"><path d="M7 4h10v2h2v2h2v2h-2v4h2v2h-2v2h-2v2H7v-2H5v-2H3v-2h2v-4H3V8h2V6h2V4zm0 4v8h10V8H7z"/>' +
    '<path d="M9 10h6v4H9z"/></g></svg>'
});

/** The status bar item: ``sim:0 1.2 GiB / 4.0 GiB``, amber while a finding is open. */
class MemoryStatus extends Widget {
  constructor(onClick: () => void) {
    super();
    this.addClass('jp-devinspect-statusbar');
    this.node.title = 'Accelerator memory: allocated / reserved (devinspect). Click for the Devices panel.';
    this.node.addEventListener('click', onClick);
  }

  setLink(link: KernelLink | null): void {
    if (this._link === link) {
      return;
    }
    this._link?.changed.disconnect(this.render, this);
    this._link = link;
    link?.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const link = this._link;
    const device = link?.state === 'live' ? link.memory?.devices[0] : undefined;
    if (!link || link.state !== 'live') {
      this.node.textContent = link?.state === 'restarted' ? 'devices: kernel restarted' : '';
    } else if (!device) {
      this.node.textContent = 'devices: no accelerator';
    } else {
      this.node.textContent = `${device.device} ${bytes(device.allocated)} / ${bytes(device.reserved)}`;
    }
    // The exact numbers, for whoever reads the page rather than the text.
    this.node.dataset.device = device?.device ?? '';
    this.node.dataset.allocated = String(device?.allocated ?? '');
    this.node.dataset.reserved = String(device?.reserved ?? '');
    this.node.classList.toggle('jp-devinspect-open-finding', !!link?.hasFindings);
    this.node.hidden = this.node.textContent === '';
  }

  private _link: KernelLink | null = null;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'devinspect-jupyterlab:plugin',
  description: 'devinspect: Apply fix edits the cells at once, a Devices side panel, accelerator memory in the status bar.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, statusBar: IStatusBar | null) => {
    const links = new Map<Kernel.IKernelConnection, KernelLink>();
    const onEdit = editHandler(tracker);

    const linkOf = (panel: NotebookPanel | null): KernelLink | null => {
      const kernel = panel?.sessionContext.session?.kernel;
      if (!kernel) {
        return null;
      }
      let link = links.get(kernel);
      if (!link) {
        link = new KernelLink(kernel, onEdit);
        links.set(kernel, link);
        kernel.disposed.connect(() => links.delete(kernel));
      }
      return link;
    };

    const panel = new DevicesPanel();
    panel.title.icon = devicesIcon;
    app.shell.add(panel, 'right', { rank: 900 });

    const status = new MemoryStatus(() => void app.commands.execute(OPEN_PANEL));
    app.commands.addCommand(OPEN_PANEL, {
      label: 'Show the Devices panel (devinspect)',
      execute: () => app.shell.activateById(panel.id)
    });
    if (statusBar) {
      statusBar.registerStatusItem('devinspect:memory', {
        item: status,
        align: 'left',
        rank: 4,
        isActive: () => true
      });
    }

    const follow = () => {
      const current = tracker.currentWidget;
      const link = linkOf(current);
      panel.setLink(link, current ? current.context.path : '');
      status.setLink(link);
    };

    tracker.widgetAdded.connect((_tracker, notebook) => {
      // Every notebook's kernel gets its link at once: edits reach a notebook that is not in front.
      notebook.sessionContext.kernelChanged.connect(() => {
        linkOf(notebook);
        if (notebook === tracker.currentWidget) {
          follow();
        }
      });
      void notebook.sessionContext.ready.then(() => {
        linkOf(notebook);
        follow();
      });
    });
    tracker.currentChanged.connect(follow);
    follow();
  }
};

export default plugin;
