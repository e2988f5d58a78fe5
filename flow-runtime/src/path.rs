//! Where a node sits among nested graphs: [`NodePath`], its [`PathStep`]s and the [`NestKind`]
//! of each. Plain data, read by errors, events, the graph and reports.

use std::fmt;
use std::sync::Arc;

/// What kind of nest a node drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum NestKind {
    /// A `ForEach`: one instance per item.
    ForEach,
    /// A `Loop`: one instance per iteration, one after the other.
    Loop,
    /// A sub-workflow step: one instance, of another workflow.
    Workflow,
}

/// One step of a [`NodePath`]: an instance of a nest node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PathStep {
    /// The nest node's name in its graph.
    pub node: &'static str,
    /// What kind of nest it is.
    pub kind: NestKind,
    /// The instance: the item's index (`ForEach`), the iteration from 0 (`Loop`), 0 for a
    /// sub-workflow.
    pub index: u64,
}

impl fmt::Display for PathStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            NestKind::ForEach => write!(f, "{}[{}]", self.node, self.index),
            NestKind::Loop => write!(f, "{}@{}", self.node, self.index),
            NestKind::Workflow => f.write_str(self.node),
        }
    }
}

/// Where a node of a nested graph sits: the nest instances that hold it, outermost first.
/// Shown as `charge[3]`, `poll@2`, `payment`, nested as `order/charge[3]/retry@1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NodePath(Arc<[PathStep]>);

impl NodePath {
    /// A path of one step.
    pub fn new(step: PathStep) -> NodePath {
        NodePath(Arc::new([step]))
    }

    /// This path with `step` appended.
    pub fn child(&self, step: PathStep) -> NodePath {
        let mut steps = self.0.to_vec();
        steps.push(step);
        NodePath(steps.into())
    }

    /// The steps, outermost first.
    pub fn steps(&self) -> &[PathStep] {
        &self.0
    }

    /// The full name of `node` inside this path: `charge[3]/fetch`.
    pub fn name_of(&self, node: &str) -> String {
        format!("{self}/{node}")
    }
}

impl fmt::Display for NodePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{step}")?;
        }
        Ok(())
    }
}
