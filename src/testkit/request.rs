//! Classifying API requests the way the API server does (its `RequestInfo`): verb,
//! group, version, namespace, resource, name and subresource, from the method, the path
//! and the query alone.
//!
//! # Guarantees
//! - Pure: no I/O, no allocation beyond the parts returned.
//! - `POST`, `PUT`, `PATCH` and `DELETE` are mutating, `GET` is not; a `GET` with
//!   `watch=true` (or `watch=1`, or under the legacy `/watch/` prefix) is a watch.
//!
//! # Assumptions
//! - Paths are those of the Kubernetes REST API (`/api/v1/...`, `/apis/<group>/<version>/...`).
//!   Anything else (`/version`, discovery) is classified with an empty resource.

use std::fmt;

/// What a request does, as the API server's authorizer would name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// `GET` of one object.
    Get,
    /// `GET` of a collection.
    List,
    /// `GET` of a collection or object with `watch=true`.
    Watch,
    /// `POST`.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH` (merge, JSON, strategic or server-side apply).
    Patch,
    /// `DELETE` of one object.
    Delete,
    /// `DELETE` of a collection.
    DeleteCollection,
    /// Any other method (`HEAD`, `OPTIONS`, ...), upper-case.
    Other(String),
}

impl Verb {
    /// Whether a request with this verb may change the cluster.
    pub fn is_mutating(&self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Other(method) => method,
        };
        f.write_str(text)
    }
}

/// One API request, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// What it does.
    pub verb: Verb,
    /// The API group (empty for the core group).
    pub group: String,
    /// The API version (empty for non-resource paths).
    pub version: String,
    /// The namespace, for namespaced requests.
    pub namespace: Option<String>,
    /// The resource, plural and lower-case (`pods`); empty for non-resource paths.
    pub resource: String,
    /// The object's name, when the path names one.
    pub name: Option<String>,
    /// The subresource (`status`, `scale`, ...), when the path names one.
    pub subresource: Option<String>,
    /// The path, without the query.
    pub path: String,
    /// The query (empty when none).
    pub query: String,
}

impl RequestInfo {
    /// Classify a request from its method, path and query.
    pub fn parse(method: &http::Method, path: &str, query: &str) -> Self {
        let watch_param = query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let (group, version) = match parts.as_slice() {
            ["api", version, ..] => {
                let v = (*version).to_owned();
                parts.drain(..2);
                (String::new(), v)
            }
            ["apis", group, version, ..] => {
                let gv = ((*group).to_owned(), (*version).to_owned());
                parts.drain(..3);
                gv
            }
            _ => {
                parts.clear();
                (String::new(), String::new())
            }
        };
        // The legacy watch prefix: /api/v1/watch/namespaces/ns/pods.
        let legacy_watch = parts.first() == Some(&"watch");
        if legacy_watch {
            parts.remove(0);
        }
        let mut namespace = None;
        if parts.first() == Some(&"namespaces") && parts.len() >= 3 {
            // namespaces/{ns}/status and namespaces/{ns}/finalize are subresources of the
            // namespace itself; anything else below namespaces/{ns} is namespaced.
            let own_subresource = parts.len() == 3 && matches!(parts[2], "status" | "finalize");
            if !own_subresource {
                namespace = Some(parts[1].to_owned());
                parts.drain(..2);
            }
        }
        let resource = parts.first().map(|s| (*s).to_owned()).unwrap_or_default();
        let name = parts.get(1).map(|s| (*s).to_owned());
        let subresource = parts.get(2).map(|s| (*s).to_owned());
        let verb = match *method {
            http::Method::GET if watch_param || legacy_watch => Verb::Watch,
            http::Method::GET if name.is_some() || resource.is_empty() => Verb::Get,
            http::Method::GET => Verb::List,
            http::Method::POST => Verb::Create,
            http::Method::PUT => Verb::Update,
            http::Method::PATCH => Verb::Patch,
            http::Method::DELETE if name.is_some() => Verb::Delete,
            http::Method::DELETE => Verb::DeleteCollection,
            ref other => Verb::Other(other.as_str().to_owned()),
        };
        Self {
            verb,
            group,
            version,
            namespace,
            resource,
            name,
            subresource,
            path: path.to_owned(),
            query: query.to_owned(),
        }
    }

    /// Whether it may change the cluster.
    pub fn is_mutating(&self) -> bool {
        self.verb.is_mutating()
    }

    /// Whether it is a long-running watch.
    pub fn is_watch(&self) -> bool {
        self.verb == Verb::Watch
    }

    /// Whether it writes the status subresource.
    pub fn is_status_write(&self) -> bool {
        self.is_mutating() && self.subresource.as_deref() == Some("status")
    }

    /// `resource` or `resource/subresource`.
    pub fn target(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

impl fmt::Display for RequestInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.target())?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn parse(method: Method, path: &str, query: &str) -> RequestInfo {
        RequestInfo::parse(&method, path, query)
    }

    #[test]
    fn a_core_namespaced_get_names_everything() {
        let r = parse(Method::GET, "/api/v1/namespaces/ns/pods/db-0", "");
        assert_eq!(r.verb, Verb::Get);
        assert_eq!((r.group.as_str(), r.version.as_str()), ("", "v1"));
        assert_eq!(r.namespace.as_deref(), Some("ns"));
        assert_eq!(r.resource, "pods");
        assert_eq!(r.name.as_deref(), Some("db-0"));
        assert_eq!(r.subresource, None);
        assert!(!r.is_mutating());
    }

    #[test]
    fn lists_and_watches_are_told_apart_by_the_query() {
        let list = parse(
            Method::GET,
            "/apis/batch/v1/namespaces/ns/jobs",
            "limit=500",
        );
        assert_eq!(list.verb, Verb::List);
        let watch = parse(
            Method::GET,
            "/apis/batch/v1/namespaces/ns/jobs",
            "labelSelector=a%3Db&watch=true&resourceVersion=5",
        );
        assert_eq!(watch.verb, Verb::Watch);
        assert!(watch.is_watch() && !watch.is_mutating());
        let legacy = parse(Method::GET, "/api/v1/watch/namespaces/ns/pods", "");
        assert_eq!(legacy.verb, Verb::Watch);
        assert_eq!(legacy.resource, "pods");
        assert_eq!(legacy.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn a_status_patch_of_a_custom_resource_is_a_mutating_status_write() {
        let r = parse(
            Method::PATCH,
            "/apis/lockstep.dev/v1alpha1/namespaces/ns/distributeddbs/orders/status",
            "fieldManager=lockstep",
        );
        assert_eq!(r.verb, Verb::Patch);
        assert_eq!(r.group, "lockstep.dev");
        assert_eq!(r.resource, "distributeddbs");
        assert_eq!(r.subresource.as_deref(), Some("status"));
        assert!(r.is_mutating() && r.is_status_write());
        assert_eq!(r.target(), "distributeddbs/status");
        assert_eq!(r.to_string(), "patch distributeddbs/status orders");
    }

    #[test]
    fn creates_deletes_and_collections() {
        let create = parse(Method::POST, "/apis/batch/v1/namespaces/ns/jobs", "");
        assert_eq!(create.verb, Verb::Create);
        assert_eq!(create.name, None);
        assert!(create.is_mutating() && !create.is_status_write());
        let delete = parse(Method::DELETE, "/api/v1/namespaces/ns/pods/db-2", "");
        assert_eq!(delete.verb, Verb::Delete);
        let all = parse(Method::DELETE, "/api/v1/namespaces/ns/pods", "");
        assert_eq!(all.verb, Verb::DeleteCollection);
        let put = parse(Method::PUT, "/api/v1/namespaces/ns/configmaps/c", "");
        assert_eq!(put.verb, Verb::Update);
    }

    #[test]
    fn namespaces_themselves_are_cluster_scoped() {
        let ns = parse(Method::GET, "/api/v1/namespaces/prod", "");
        assert_eq!(ns.namespace, None);
        assert_eq!(ns.resource, "namespaces");
        assert_eq!(ns.name.as_deref(), Some("prod"));
        let finalize = parse(Method::PUT, "/api/v1/namespaces/prod/finalize", "");
        assert_eq!(finalize.namespace, None);
        assert_eq!(finalize.resource, "namespaces");
        assert_eq!(finalize.subresource.as_deref(), Some("finalize"));
        let crd = parse(
            Method::PATCH,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.lockstep.dev",
            "",
        );
        assert_eq!(crd.namespace, None);
        assert_eq!(crd.resource, "customresourcedefinitions");
    }

    #[test]
    fn non_resource_paths_have_no_resource() {
        let version = parse(Method::GET, "/version", "");
        assert_eq!(version.verb, Verb::Get);
        assert_eq!(version.resource, "");
        let discovery = parse(Method::GET, "/apis", "");
        assert_eq!(discovery.resource, "");
        assert_eq!(
            parse(Method::HEAD, "/healthz", "").verb,
            Verb::Other("HEAD".into())
        );
    }
}
