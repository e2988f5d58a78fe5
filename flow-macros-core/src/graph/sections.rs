//! Critical sections (`exclusive = "group"`) while the graph is built: the sections around the
//! step being built, and the nodes each one holds.

use syn::LitStr;

use super::SectionDef;
use super::build::Builder;
use crate::suggest::on_line;

impl Builder<'_> {
    /// Opens the section of `exclusive = group`, if given; whether it opened one.
    pub(super) fn open_section(&mut self, group: Option<&LitStr>) -> bool {
        group.is_some_and(|group| self.open(group))
    }

    /// Closes the section `open_section` opened, if it did.
    pub(super) fn close_section(&mut self, opened: bool) {
        if opened {
            self.sections.pop();
        }
    }

    /// Adds `node`, the last node pushed, to the sections around it.
    pub(super) fn enter_sections(&mut self, node: usize) {
        for &section in &self.sections {
            self.dag.sections[section].nodes.push(node);
        }
    }

    /// Opens a section for `group` around the nodes a step is about to add, unless the step is
    /// already inside a section of the same group, which could never be granted (an error).
    fn open(&mut self, group: &LitStr) -> bool {
        let dag = &mut self.dag;
        if let Some(&outer) = self
            .sections
            .iter()
            .find(|&&s| dag.sections[s].group.value() == group.value())
        {
            self.cx.error(
                group.span(),
                format!(
                    "this section is inside another `exclusive = {:?}` section{}: it would wait for the group its own enclosing section holds, forever; remove one of the two `exclusive` options",
                    group.value(),
                    on_line(dag.sections[outer].group.span()),
                ),
            );
            return false;
        }
        dag.sections.push(SectionDef {
            group: group.clone(),
            nodes: Vec::new(),
        });
        self.sections.push(dag.sections.len() - 1);
        true
    }
}
